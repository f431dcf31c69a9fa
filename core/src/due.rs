//! A heap of things due at a moment, each held by a weak reference: the watchdog's deadlines
//! and a Locker's renewal schedule. Entries are not removed when what they point to ends or is
//! rescheduled (a binary heap cannot remove from its middle): their owner skips the stale ones
//! when they come due, and the heap prunes them once [`PRUNE_SLACK`] have piled up since the
//! last pruning. Without pruning, released leases with a one-hour ttl would each keep an entry
//! (and their allocation, through the weak reference) for an hour; with it the heap holds the
//! current entries plus the slack, at an amortised constant cost per push.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::sync::Weak;

use crate::clock::BootInstant;

/// How many entries beyond the current ones the heap may hold before it is pruned.
pub(crate) const PRUNE_SLACK: usize = 1024;

/// One entry: `item` is due at `at`.
pub(crate) struct Due<T: ?Sized> {
    pub(crate) at: BootInstant,
    pub(crate) item: Weak<T>,
}

impl<T: ?Sized> PartialEq for Due<T> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}
impl<T: ?Sized> Eq for Due<T> {}
impl<T: ?Sized> PartialOrd for Due<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T: ?Sized> Ord for Due<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.at.cmp(&other.at)
    }
}

/// The earliest entry first.
pub(crate) struct DueHeap<T: ?Sized> {
    entries: BinaryHeap<Reverse<Due<T>>>,
    /// The size at which the next push prunes first.
    prune_at: usize,
}

impl<T: ?Sized> Default for DueHeap<T> {
    fn default() -> Self {
        DueHeap {
            entries: BinaryHeap::new(),
            prune_at: PRUNE_SLACK,
        }
    }
}

impl<T: ?Sized> DueHeap<T> {
    /// Adds `item` due `at`, first dropping the entries `is_current` calls stale when the heap
    /// has reached its pruning size.
    pub(crate) fn push(
        &mut self,
        at: BootInstant,
        item: Weak<T>,
        is_current: impl Fn(&Due<T>) -> bool,
    ) {
        if self.entries.len() >= self.prune_at {
            self.entries.retain(|Reverse(entry)| is_current(entry));
            self.prune_at = self.entries.len() + PRUNE_SLACK;
        }
        self.entries.push(Reverse(Due { at, item }));
    }

    /// The earliest entry.
    pub(crate) fn peek(&self) -> Option<&Due<T>> {
        self.entries.peek().map(|Reverse(entry)| entry)
    }

    /// Takes the earliest entry.
    pub(crate) fn pop(&mut self) -> Option<Due<T>> {
        self.entries.pop().map(|Reverse(entry)| entry)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn the_earliest_comes_first_and_stale_entries_are_pruned_at_the_slack() {
        let now = BootInstant::now();
        let live = Arc::new(0u8);
        let mut heap = DueHeap::default();
        let current = |entry: &Due<u8>| entry.item.upgrade().is_some();
        for i in 0..PRUNE_SLACK as u64 {
            let gone = Arc::new(1u8);
            heap.push(
                now.checked_add(std::time::Duration::from_millis(i + 10))
                    .unwrap(),
                Arc::downgrade(&gone),
                current,
            );
        }
        heap.push(now, Arc::downgrade(&live), current);
        assert_eq!(heap.len(), 1, "the stale entries were pruned");
        heap.push(
            now.checked_add(std::time::Duration::from_secs(1)).unwrap(),
            Arc::downgrade(&live),
            current,
        );
        assert_eq!(heap.peek().map(|e| e.at), Some(now));
        assert!(heap.pop().is_some_and(|e| e.at == now));
        assert_eq!(heap.len(), 1);
    }
}
