//! Elastic all-reduce with a fixed global batch (reference section 10):
//! with N the configured maximum world size and N0 the current one, rank r
//! accumulates `floor(N / N0) + (1 if r < N mod N0)` micro-batches before it
//! syncs, so the global batch stays N micro-batches whatever N0 is.

/// Micro-batches of every rank, for world size `n0` (empty when `n0` is 0).
pub fn micro_batches(max_world: u32, n0: u32) -> Vec<u32> {
    if n0 == 0 {
        return Vec::new();
    }
    (0..n0)
        .map(|r| max_world / n0 + u32::from(r < max_world % n0))
        .collect()
}

/// The elastic sampler's checkpoint: samples consumed after `step` sync steps.
pub fn completed_num(step: u64, micro_batch_size: u64, num_replicas: u64) -> u64 {
    step * micro_batch_size * num_replicas
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r10_1_micro_batches() {
        // N=8, N0=3 -> (3,3,2), which sums to N.
        assert_eq!(micro_batches(8, 3), vec![3, 3, 2]);
        for (n, n0, want) in [
            (8, 8, vec![1; 8]),
            (8, 1, vec![8]),
            (8, 5, vec![2, 2, 2, 1, 1]),
            (4, 0, vec![]),
        ] {
            assert_eq!(micro_batches(n, n0), want, "{n} {n0}");
        }
        for n0 in 1..=16 {
            assert_eq!(micro_batches(16, n0).iter().sum::<u32>(), 16, "N0 = {n0}");
        }
        assert_eq!(completed_num(10, 4, 3), 120);
    }
}
