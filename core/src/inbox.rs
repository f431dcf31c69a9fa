//! A subscriber's queue of events or log records, and the list of subscribers that fills it.
//!
//! Emitters only push into queues: no subscriber code ever runs on the thread that emits
//! (a tokio worker, the deadline watchdog), so a slow or blocking subscriber, or one that needs
//! a host lock such as Python's GIL, can never stall renewals. Subscribers take items out on
//! their own thread, blocking with a timeout or awaiting. With nobody subscribed, emitting
//! costs one relaxed atomic load.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::sync::unpoisoned;

/// How many items a subscriber that does not keep up may have waiting; past that the oldest
/// are dropped (and counted), so a forgotten subscription cannot grow without bound.
pub const INBOX_CAPACITY: usize = 10_000;

pub(crate) struct Inbox<T> {
    queue: Mutex<VecDeque<T>>,
    ready: Condvar,
    notify: Notify,
    closed: AtomicBool,
    dropped: AtomicU64,
}

impl<T> Inbox<T> {
    fn new() -> Self {
        Inbox {
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            notify: Notify::new(),
            closed: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
        }
    }

    fn push(&self, item: T) {
        {
            let mut queue = unpoisoned(&self.queue);
            if queue.len() >= INBOX_CAPACITY {
                queue.pop_front();
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            queue.push_back(item);
        }
        self.ready.notify_all();
        self.notify.notify_one();
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.ready.notify_all();
        self.notify.notify_one();
    }

    pub fn try_recv(&self) -> Option<T> {
        unpoisoned(&self.queue).pop_front()
    }

    /// The next item, waiting up to `timeout` (forever when `None`); `None` on timeout or
    /// once closed and drained.
    pub fn recv_blocking(&self, timeout: Option<Duration>) -> Option<T> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut queue = unpoisoned(&self.queue);
        loop {
            if let Some(item) = queue.pop_front() {
                return Some(item);
            }
            if self.closed.load(Ordering::Acquire) {
                return None;
            }
            queue = match deadline {
                None => self.ready.wait(queue).unwrap_or_else(|e| e.into_inner()),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return None;
                    }
                    self.ready
                        .wait_timeout(queue, deadline - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }

    /// The next item; `None` once closed and drained.
    pub async fn recv(&self) -> Option<T> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(item) = self.try_recv() {
                return Some(item);
            }
            if self.closed.load(Ordering::Acquire) {
                return None;
            }
            notified.await;
        }
    }

    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

struct Entry<T, F> {
    id: u64,
    inbox: Arc<Inbox<T>>,
    filter: F,
}

/// The subscribers of one kind of item; `F` is what each subscriber filters on.
pub(crate) struct Hub<T, F> {
    entries: Mutex<Vec<Entry<T, F>>>,
    active: AtomicBool,
    next_id: AtomicU64,
}

impl<T: Clone, F: Clone> Hub<T, F> {
    pub const fn new() -> Self {
        Hub {
            entries: Mutex::new(Vec::new()),
            active: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
        }
    }

    /// Whether anybody subscribed: the one check emitters make before building an item.
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Pushes `item` to every subscriber whose filter `wants` it.
    pub fn publish(&self, item: &T, wants: impl Fn(&F) -> bool) {
        for entry in unpoisoned(&self.entries).iter() {
            if wants(&entry.filter) {
                entry.inbox.push(item.clone());
            }
        }
    }

    pub fn subscribe(self: &Arc<Self>, filter: F) -> (u64, Arc<Inbox<T>>) {
        let inbox = Arc::new(Inbox::new());
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut entries = unpoisoned(&self.entries);
        entries.push(Entry {
            id,
            inbox: inbox.clone(),
            filter,
        });
        self.active.store(true, Ordering::Relaxed);
        (id, inbox)
    }

    pub fn set_filter(&self, id: u64, filter: F) {
        if let Some(entry) = unpoisoned(&self.entries).iter_mut().find(|e| e.id == id) {
            entry.filter = filter;
        }
    }

    /// The filters of every subscriber (to compute a global threshold).
    pub fn filters(&self) -> Vec<F> {
        unpoisoned(&self.entries)
            .iter()
            .map(|e| e.filter.clone())
            .collect()
    }

    pub fn unsubscribe(&self, id: u64) {
        let mut entries = unpoisoned(&self.entries);
        entries.retain(|e| {
            if e.id == id {
                e.inbox.close();
                false
            } else {
                true
            }
        });
        self.active.store(!entries.is_empty(), Ordering::Relaxed);
    }

    /// Closes every subscriber's inbox (their owner was closed).
    pub fn close_all(&self) {
        let mut entries = unpoisoned(&self.entries);
        for entry in entries.drain(..) {
            entry.inbox.close();
        }
        self.active.store(false, Ordering::Relaxed);
    }
}

/// What a subscription handle keeps: its inbox, and the way back to its hub to leave it.
pub(crate) struct Membership<T, F> {
    pub id: u64,
    pub inbox: Arc<Inbox<T>>,
    pub hub: Weak<Hub<T, F>>,
}

impl<T, F> Drop for Membership<T, F> {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.upgrade() {
            let mut entries = unpoisoned(&hub.entries);
            entries.retain(|e| e.id != self.id);
            hub.active.store(!entries.is_empty(), Ordering::Relaxed);
        }
        self.inbox.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_arrive_in_order_and_a_closed_inbox_drains_then_ends() {
        let hub: Arc<Hub<u32, ()>> = Arc::new(Hub::new());
        assert!(!hub.is_active());
        let (id, inbox) = hub.subscribe(());
        assert!(hub.is_active());
        for i in 0..5 {
            hub.publish(&i, |_| true);
        }
        assert_eq!(
            inbox.recv_blocking(Some(Duration::from_millis(10))),
            Some(0)
        );
        hub.unsubscribe(id);
        assert!(!hub.is_active());
        let rest: Vec<u32> = std::iter::from_fn(|| inbox.recv_blocking(None)).collect();
        assert_eq!(rest, [1, 2, 3, 4]);
    }

    #[test]
    fn a_subscriber_that_does_not_keep_up_loses_the_oldest() {
        let hub: Arc<Hub<usize, ()>> = Arc::new(Hub::new());
        let (_, inbox) = hub.subscribe(());
        for i in 0..INBOX_CAPACITY + 3 {
            hub.publish(&i, |_| true);
        }
        assert_eq!(inbox.dropped(), 3);
        assert_eq!(inbox.try_recv(), Some(3));
    }

    #[tokio::test]
    async fn async_receive_is_woken_from_another_thread() {
        let hub: Arc<Hub<u8, ()>> = Arc::new(Hub::new());
        let (_, inbox) = hub.subscribe(());
        let h = hub.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            h.publish(&7, |_| true);
        });
        let got = tokio::time::timeout(Duration::from_secs(5), inbox.recv())
            .await
            .unwrap();
        assert_eq!(got, Some(7));
    }
}
