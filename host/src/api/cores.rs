//! The API's few heavy reads (an hour of hundreds of series: over a million
//! rollup buckets to decode, megabytes of JSON to write) split over the
//! machine's cores with scoped threads. Blocking: call it from
//! `spawn_blocking`, never on an async worker.

/// `f` over `items`, results in the items' order (`None`s left out), on up
/// to one thread per core and at most `useful_threads` (the caller's measure
/// of how many threads the job is worth: a thread costs tens of
/// microseconds, so small jobs stay on the calling thread).
pub fn map_on_cores<T: Sync, R: Send>(
    items: &[T],
    useful_threads: usize,
    f: impl Fn(&T) -> Option<R> + Sync,
) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(useful_threads)
        .min(items.len())
        .max(1);
    if threads == 1 {
        return items.iter().filter_map(&f).collect();
    }
    let per = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|s| {
        let parts: Vec<_> = items
            .chunks(per)
            .map(|part| s.spawn(move || part.iter().filter_map(f).collect::<Vec<_>>()))
            .collect();
        parts.into_iter().flat_map(|p| p.join().unwrap_or_default()).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::map_on_cores;

    #[test]
    fn results_keep_the_items_order_whatever_the_threads() {
        let items: Vec<u32> = (0..1000).collect();
        for threads in [1, 2, 7, 64] {
            let out = map_on_cores(&items, threads, |&i| (i % 3 != 0).then_some(i * 2));
            let want: Vec<u32> = items.iter().filter(|&&i| i % 3 != 0).map(|i| i * 2).collect();
            assert_eq!(out, want, "{threads} threads");
        }
        assert!(map_on_cores(&[] as &[u32], 4, |&i| Some(i)).is_empty());
    }
}
