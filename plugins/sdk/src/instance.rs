//! `InstanceCell`: a home for a plugin's state between hook calls.
//!
//! Hooks are plain functions (no `self`), so a plugin keeps its state in a
//! static. The host never calls two hooks at once, so the lock is never
//! contended; it is there because a `static` must be `Sync`.

use std::sync::{Mutex, MutexGuard, PoisonError};

pub struct InstanceCell<T> {
    inner: Mutex<Option<T>>,
}

impl<T> Default for InstanceCell<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> InstanceCell<T> {
    pub const fn new() -> Self {
        InstanceCell {
            inner: Mutex::new(None),
        }
    }

    // A panic traps the whole instance, so a poisoned lock can only be seen
    // by native tests; the state is still usable there.
    fn lock(&self) -> MutexGuard<'_, Option<T>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stores the state (usually in `start`), replacing any earlier one.
    pub fn set(&self, value: T) {
        *self.lock() = Some(value);
    }

    /// Runs `f` on the state; `Err` when `set` was never called, so hooks can
    /// write `STATE.with(|s| s.on_samples(batch))?`.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Result<R, String> {
        match self.lock().as_mut() {
            Some(state) => Ok(f(state)),
            None => Err("plugin state is not set: `start` has not succeeded".to_string()),
        }
    }

    pub fn is_set(&self) -> bool {
        self.lock().is_some()
    }

    /// Removes and returns the state (e.g. in `stop`).
    pub fn take(&self) -> Option<T> {
        self.lock().take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_state_between_calls() {
        static CELL: InstanceCell<Vec<u32>> = InstanceCell::new();
        assert!(CELL.with(|v| v.len()).is_err());
        CELL.set(vec![1]);
        CELL.with(|v| v.push(2)).unwrap();
        assert_eq!(CELL.with(|v| v.clone()), Ok(vec![1, 2]));
        assert_eq!(CELL.take(), Some(vec![1, 2]));
        assert!(!CELL.is_set());
    }
}
