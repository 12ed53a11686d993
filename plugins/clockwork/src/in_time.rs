//! `requests_in_time` for infer actions that arrive without it.
//!
//! An infer action's goodput is its worker time × in-time requests / batch
//! size. Clockwork's controller knows the in-time count when it logs the
//! action, but a reporter other than Clockwork may leave it out; the host
//! gives an absent count as 0, so "none was given" and "none met its
//! deadline" look the same here. The requests that name the action tell
//! which: each finished request carries its `action_id` and whether it met
//! its deadline, and an infer action of batch size b served exactly b of
//! them. So an infer action that succeeded with a count of 0 is held until
//! its b requests have come (or `lag_ms` has passed, for requests that never
//! come), and its count is then the number of those that met their deadline.
//! When none did, the count stays 0, as given; when some did, the requests
//! are the controller's own record of the same fact, and they win.

use std::collections::{HashMap, VecDeque};

use crate::rows::{Action, INFER, Request};

/// Actions whose request tallies are kept at most (older ones are dropped).
const TALLIES_KEPT: usize = 50_000;

#[derive(Debug, Default)]
pub struct InTime {
    lag_ns: u64,
    /// Per action id: (requests seen, requests that met their deadline).
    tally: HashMap<u64, (u32, u32)>,
    tally_order: VecDeque<u64>,
    /// Infer actions waiting for their requests: (host time held, action).
    held: VecDeque<(u64, Action)>,
    /// Actions whose count was derived from their requests.
    pub derived: u64,
}

impl InTime {
    pub fn new(lag_ns: u64) -> Self {
        InTime {
            lag_ns,
            ..Default::default()
        }
    }

    /// Whether `a` needs its count derived: a successful infer action that
    /// gave none (a failed one has no goodput whatever its requests did).
    pub fn needs(a: &Action) -> bool {
        a.action_type == INFER && a.status == 0 && a.requests_in_time == 0
    }

    /// Counts a finished request towards the action that served it.
    pub fn request(&mut self, r: &Request) {
        if r.action_id == 0 {
            return;
        }
        let t = self.tally.entry(r.action_id).or_insert_with(|| {
            self.tally_order.push_back(r.action_id);
            (0, 0)
        });
        t.0 += 1;
        t.1 += r.deadline_met() as u32;
        if self.tally_order.len() > TALLIES_KEPT
            && let Some(old) = self.tally_order.pop_front()
        {
            self.tally.remove(&old);
        }
    }

    /// Holds an action that [`needs`](Self::needs) its count.
    pub fn hold(&mut self, now: u64, a: Action) {
        self.held.push_back((now, a));
    }

    /// The held actions that are ready, with their count filled in: every
    /// request of the batch has come, or `lag` has passed (all when `force`).
    pub fn ready(&mut self, now: u64, force: bool) -> Vec<Action> {
        let mut out = Vec::new();
        let mut keep = VecDeque::new();
        while let Some((at, mut a)) = self.held.pop_front() {
            let (seen, met) = self.tally.get(&a.action_id).copied().unwrap_or((0, 0));
            if seen >= a.batch_size || force || now.saturating_sub(at) >= self.lag_ns {
                a.requests_in_time = met.min(a.batch_size);
                self.derived += 1;
                out.push(a);
            } else {
                keep.push_back((at, a));
            }
        }
        self.held = keep;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn infer(id: u64, batch: u32) -> Action {
        Action {
            action_id: id,
            action_type: INFER,
            batch_size: batch,
            ..Default::default()
        }
    }

    fn request(action: u64, met: bool) -> Request {
        Request {
            action_id: action,
            arrival: 10,
            departure: 20,
            deadline: if met { 30 } else { 15 },
            ..Default::default()
        }
    }

    #[test]
    fn a_held_action_waits_for_its_batch_then_counts_the_requests_in_time() {
        let mut t = InTime::new(1000);
        assert!(InTime::needs(&infer(1, 3)));
        assert!(!InTime::needs(&Action {
            requests_in_time: 2,
            ..infer(1, 3)
        }));
        assert!(!InTime::needs(&Action {
            status: 5,
            ..infer(1, 3)
        }));
        t.request(&request(1, true)); // a request may come before its action
        t.hold(0, infer(1, 3));
        t.request(&request(1, false));
        assert!(t.ready(10, false).is_empty(), "2 of 3 requests seen");
        t.request(&request(1, true));
        let ready = t.ready(20, false);
        assert_eq!(ready.len(), 1);
        assert_eq!(ready[0].requests_in_time, 2);
        assert_eq!(t.derived, 1);
    }

    #[test]
    fn requests_that_never_come_leave_what_came_after_the_lag() {
        let mut t = InTime::new(1000);
        t.hold(0, infer(7, 4));
        t.request(&request(7, true));
        assert!(t.ready(999, false).is_empty());
        assert_eq!(t.ready(1000, false)[0].requests_in_time, 1);
        t.hold(0, infer(8, 4));
        assert_eq!(t.ready(1, true)[0].requests_in_time, 0, "forced at stop");
    }
}
