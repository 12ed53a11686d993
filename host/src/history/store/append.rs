//! Points in: a series key resolved to its id, points pushed into the raw
//! head, and each point rolled up through the tiers' open buckets (a bucket
//! that closes in one tier feeds the next).

use std::fs::File;
use std::sync::Arc;

use super::segment::seal;
use super::{Agg, Counters, Inner, Series, SeriesTier, TierSpec, TierStore, series_payload};
use crate::history::log::{self, KIND_SERIES};
use crate::history::{Refused, SeriesKey};

impl Inner {
    pub(crate) fn resolve(&mut self, key: &SeriesKey) -> Result<u32, Refused> {
        if let Some(&id) = self.by_key.get(key) {
            return Ok(id);
        }
        if self.series.len() >= self.max_series {
            self.c.refused_series += 1;
            return Err(Refused::TooManySeries { max: self.max_series });
        }
        let id = self.next_id;
        self.next_id = self.next_id.checked_add(1).ok_or(Refused::IdsExhausted)?;
        log::frame(&mut self.slog.pending, KIND_SERIES, &series_payload(id, key));
        self.by_key.insert(key.clone(), id);
        self.series.insert(id, Series::new(key.clone(), &self.specs));
        Ok(id)
    }

    pub(crate) fn append(&mut self, sid: u32, pts: &[(u64, f64)]) {
        let now_s = self.idle_clock_s();
        let Inner {
            series,
            tiers,
            specs,
            c,
            scratch,
            to_sync,
            seg_target,
            wal,
            dirty,
            max_t,
            ..
        } = self;
        let Some(s) = series.get_mut(&sid) else { return };
        for &(t, v) in pts {
            if t <= s.last_t {
                c.out_of_order += 1;
                continue;
            }
            c.points_appended += 1;
            s.last_t = t;
            if s.wal.is_empty() {
                dirty.push(sid);
            }
            s.wal.push(t, &[v]);
            let raw = &mut s.tiers[0];
            if raw.head.is_empty() {
                raw.head_gen = wal.gen_;
            }
            raw.head.push(t, &[v]);
            raw.last_t = t;
            if raw.head.len() >= specs[0].max_points || t - raw.head.t_first() >= specs[0].max_span_ns {
                seal(&mut tiers[0], sid, raw, c, scratch, to_sync, *seg_target, false);
            }
            if v.is_nan() || specs.len() < 2 {
                continue;
            }
            // Roll up: a bucket that closes in tier k feeds tier k+1.
            let mut inp = Agg::point(t, v);
            let mut inp_t = t;
            for k in 1..specs.len() {
                match feed(&specs[k], &mut s.tiers[k], &mut tiers[k].late, inp_t, &inp) {
                    Some(closed) => {
                        push_bucket(
                            &specs[k],
                            &mut tiers[k],
                            sid,
                            &mut s.tiers[k],
                            &closed,
                            c,
                            scratch,
                            to_sync,
                            *seg_target,
                        );
                        inp = closed;
                        inp_t = closed.start;
                    }
                    None => break,
                }
            }
        }
        s.last_append_s = now_s;
        *max_t = (*max_t).max(s.last_t);
        s.idle_sealed = false;
    }

    /// Closes every open bucket of a series (finest first, each feeding the next) and seals every head.
    pub(super) fn close_series(&mut self, sid: u32) {
        let Inner {
            series,
            tiers,
            specs,
            c,
            scratch,
            to_sync,
            seg_target,
            ..
        } = self;
        let Some(s) = series.get_mut(&sid) else { return };
        for k in 1..specs.len() {
            if let Some(a) = s.tiers[k].agg.take() {
                push_bucket(
                    &specs[k],
                    &mut tiers[k],
                    sid,
                    &mut s.tiers[k],
                    &a,
                    c,
                    scratch,
                    to_sync,
                    *seg_target,
                );
                if k + 1 < specs.len() {
                    // Merge into the coarser open bucket; anything it closes is pushed too.
                    let mut inp = a;
                    for j in k + 1..specs.len() {
                        match feed(&specs[j], &mut s.tiers[j], &mut tiers[j].late, inp.start, &inp) {
                            Some(closed) => {
                                push_bucket(
                                    &specs[j],
                                    &mut tiers[j],
                                    sid,
                                    &mut s.tiers[j],
                                    &closed,
                                    c,
                                    scratch,
                                    to_sync,
                                    *seg_target,
                                );
                                inp = closed;
                            }
                            None => break,
                        }
                    }
                }
            }
        }
        for (k, st) in s.tiers.iter_mut().enumerate() {
            seal(&mut tiers[k], sid, st, c, scratch, to_sync, *seg_target, true);
        }
    }
}

/// Adds an input (a raw point as a one-point bucket, or a finer closed bucket)
/// to tier `st`'s open bucket; returns the bucket it closes, if any.
pub(super) fn feed(spec: &TierSpec, st: &mut SeriesTier, late: &mut u64, t: u64, inp: &Agg) -> Option<Agg> {
    let b = t / spec.step_ns * spec.step_ns;
    match &mut st.agg {
        Some(a) if a.start == b => {
            a.merge(inp);
            None
        }
        Some(a) if b > a.start => {
            let closed = *a;
            let mut n = *inp;
            n.start = b;
            st.agg = Some(n);
            Some(closed)
        }
        Some(_) => {
            *late += 1;
            None
        }
        None => {
            if st.last_t != 0 && b <= st.last_t {
                *late += 1;
                return None;
            }
            let mut n = *inp;
            n.start = b;
            st.agg = Some(n);
            None
        }
    }
}

/// Appends a closed bucket to a rollup tier's head, sealing it when full.
#[allow(clippy::too_many_arguments)]
pub(super) fn push_bucket(
    spec: &TierSpec,
    tier: &mut TierStore,
    sid: u32,
    st: &mut SeriesTier,
    a: &Agg,
    c: &mut Counters,
    scratch: &mut Vec<u8>,
    to_sync: &mut Vec<Arc<File>>,
    seg_target: u64,
) {
    if a.count == 0 || (st.last_t != 0 && a.start <= st.last_t) {
        return;
    }
    st.head.push(a.start, &a.values());
    st.last_t = a.start;
    if st.head.len() >= spec.max_points || a.start - st.head.t_first() >= spec.max_span_ns {
        seal(tier, sid, st, c, scratch, to_sync, seg_target, false);
    }
}
