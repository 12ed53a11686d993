//! A plugin thread's queue of work: bounded, one receiver, and a receiver
//! that goes straight to sleep when it is empty.
//!
//! ```text
//!  senders (sampler, ingest, API)          the plugin's thread
//!  try_send ──► [ work … ≤ capacity ] ──► recv_until(deadline)
//!     full: Err(Full(work)), never blocks       empty: sleeps on a condvar until
//!  send_timeout (unloading): waits for room      work, the deadline, or no sender
//! ```
//!
//! Why not a channel crate: crossbeam's `recv` spins and then calls
//! `sched_yield` four times before it sleeps. A plugin thread goes back to
//! sleep after every delivery, so each wake-up paid for several yields (and
//! the involuntary switches they cause) on a queue that is empty nearly every
//! time it is read (docs/benchmarks.md).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

/// Why `try_send` or `send_timeout` gave the work back.
#[derive(Debug, PartialEq, Eq)]
pub enum SendError<T> {
    /// The queue is at capacity.
    Full(T),
    /// The receiver is gone (the thread ended).
    Closed(T),
}

/// Why `recv_until` returned without work.
#[derive(Debug, PartialEq, Eq)]
pub enum RecvError {
    /// The deadline passed.
    Timeout,
    /// Every sender is gone and the queue is empty.
    Closed,
}

struct State<T> {
    queue: VecDeque<T>,
    senders: usize,
    receiver: bool,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    /// Signalled when work arrives or the last sender leaves.
    work: Condvar,
    /// Signalled when work is taken or the receiver leaves.
    room: Condvar,
    capacity: usize,
}

/// A mailbox holding at most `capacity` items (at least 1).
pub fn mailbox<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            queue: VecDeque::new(),
            senders: 1,
            receiver: true,
        }),
        work: Condvar::new(),
        room: Condvar::new(),
        capacity: capacity.max(1),
    });
    (Sender(shared.clone()), Receiver(shared))
}

pub struct Sender<T>(Arc<Shared<T>>);

impl<T> Sender<T> {
    /// Queues `item` if there is room; never waits.
    pub fn try_send(&self, item: T) -> Result<(), SendError<T>> {
        let mut st = self.0.state.lock();
        if !st.receiver {
            return Err(SendError::Closed(item));
        }
        if st.queue.len() >= self.0.capacity {
            return Err(SendError::Full(item));
        }
        st.queue.push_back(item);
        drop(st);
        self.0.work.notify_one();
        Ok(())
    }

    /// Queues `item`, waiting for room until `deadline`.
    pub fn send_until(&self, item: T, deadline: Instant) -> Result<(), SendError<T>> {
        let mut st = self.0.state.lock();
        loop {
            if !st.receiver {
                return Err(SendError::Closed(item));
            }
            if st.queue.len() < self.0.capacity {
                st.queue.push_back(item);
                drop(st);
                self.0.work.notify_one();
                return Ok(());
            }
            if self.0.room.wait_until(&mut st, deadline).timed_out() {
                return Err(SendError::Full(item));
            }
        }
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.0.state.lock().senders += 1;
        Sender(self.0.clone())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut st = self.0.state.lock();
        st.senders -= 1;
        if st.senders == 0 {
            drop(st);
            self.0.work.notify_all();
        }
    }
}

pub struct Receiver<T>(Arc<Shared<T>>);

impl<T> Receiver<T> {
    /// The next item, waiting until `deadline` (None: as long as it takes).
    /// Queued work is handed out even after the last sender left.
    pub fn recv_until(&self, deadline: Option<Instant>) -> Result<T, RecvError> {
        let mut st = self.0.state.lock();
        loop {
            if let Some(item) = st.queue.pop_front() {
                drop(st);
                self.0.room.notify_one();
                return Ok(item);
            }
            if st.senders == 0 {
                return Err(RecvError::Closed);
            }
            match deadline {
                Some(d) => {
                    if self.0.work.wait_until(&mut st, d).timed_out() && st.queue.is_empty() {
                        return Err(if st.senders == 0 {
                            RecvError::Closed
                        } else {
                            RecvError::Timeout
                        });
                    }
                }
                None => self.0.work.wait(&mut st),
            }
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.0.state.lock().receiver = false;
        self.0.room.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_full_mailbox_gives_the_item_back_and_keeps_the_order() {
        let (tx, rx) = mailbox(2);
        tx.try_send(1).unwrap();
        tx.try_send(2).unwrap();
        assert_eq!(tx.try_send(3), Err(SendError::Full(3)));
        assert_eq!(rx.recv_until(None), Ok(1));
        tx.try_send(4).unwrap();
        assert_eq!(rx.recv_until(None), Ok(2));
        assert_eq!(rx.recv_until(None), Ok(4));
    }

    #[test]
    fn an_empty_mailbox_times_out_at_the_deadline() {
        let (_tx, rx) = mailbox::<u32>(1);
        let t0 = Instant::now();
        assert_eq!(
            rx.recv_until(Some(t0 + Duration::from_millis(30))),
            Err(RecvError::Timeout)
        );
        assert!(t0.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn a_sleeping_receiver_wakes_for_work_from_another_thread() {
        let (tx, rx) = mailbox(1);
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            tx.try_send(7).unwrap();
            tx
        });
        assert_eq!(rx.recv_until(Some(Instant::now() + Duration::from_secs(10))), Ok(7));
        drop(sender.join().unwrap());
        assert_eq!(rx.recv_until(None), Err(RecvError::Closed), "the last sender left");
    }

    #[test]
    fn queued_work_outlives_its_senders_and_a_gone_receiver_refuses_more() {
        let (tx, rx) = mailbox(4);
        let tx2 = tx.clone();
        tx.try_send("a").unwrap();
        drop(tx);
        tx2.try_send("b").unwrap();
        drop(tx2);
        assert_eq!(rx.recv_until(None), Ok("a"));
        assert_eq!(rx.recv_until(None), Ok("b"));
        assert_eq!(rx.recv_until(None), Err(RecvError::Closed));

        let (tx, rx) = mailbox(1);
        drop(rx);
        assert_eq!(tx.try_send(1), Err(SendError::Closed(1)));
        assert_eq!(tx.send_until(2, Instant::now()), Err(SendError::Closed(2)));
    }

    #[test]
    fn send_until_waits_for_room() {
        let (tx, rx) = mailbox(1);
        tx.try_send(1).unwrap();
        let taker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            let first = rx.recv_until(None);
            (first, rx)
        });
        tx.send_until(2, Instant::now() + Duration::from_secs(10)).unwrap();
        let (first, rx) = taker.join().unwrap();
        assert_eq!(first, Ok(1));
        assert_eq!(rx.recv_until(None), Ok(2));
        assert_eq!(tx.send_until(3, Instant::now()), Ok(()));
        assert_eq!(
            tx.send_until(4, Instant::now() + Duration::from_millis(10)),
            Err(SendError::Full(4))
        );
    }
}
