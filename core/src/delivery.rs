//! A queue that hands what the core reports (measurements, spans) to a thread of its own,
//! which delivers it to a host in batches. For bindings whose host may only be entered from
//! threads it can block (Python's GIL, a JVM or Node callback): lock operations never wait on
//! the host's code, and a host that stops taking what it is given loses the excess instead of
//! holding up a lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};

use crate::error::{Error, Result};

/// How many items a queue holds before it drops new ones.
const QUEUE: usize = 4096;

/// The most items handed to the host in one call.
const BATCH: usize = 256;

/// The sending end of a queue made by [`on_own_thread`]; the thread ends when it is dropped.
pub(crate) struct Queue<T> {
    sender: SyncSender<T>,
    /// Counts what was dropped because the queue was full.
    dropped: &'static AtomicU64,
    what: &'static str,
}

impl<T> Queue<T> {
    /// Queues `item`, or drops it (counted) when the host has fallen 4096 behind.
    pub(crate) fn push(&self, item: T) {
        match self.sender.try_send(item) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("{} queue full: one was dropped", self.what);
            }
        }
    }
}

/// Starts a thread named `thread_name` that calls `deliver` with what has queued up (at least
/// one item, at most 256: an acquire reports several at once, so the host is entered once for
/// them). A `deliver` that panics loses that batch, and the thread goes on.
pub(crate) fn on_own_thread<T: Send + 'static>(
    thread_name: &str,
    what: &'static str,
    dropped: &'static AtomicU64,
    mut deliver: impl FnMut(&[T]) + Send + 'static,
) -> Result<Queue<T>> {
    let (sender, queued) = sync_channel::<T>(QUEUE);
    std::thread::Builder::new()
        .name(thread_name.to_string())
        .spawn(move || {
            let mut batch = Vec::with_capacity(BATCH);
            while let Ok(first) = queued.recv() {
                batch.push(first);
                batch.extend(queued.try_iter().take(BATCH - 1));
                // A host callback that panics must not end the thread (or cross into the host).
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| deliver(&batch)));
                batch.clear();
            }
        })
        .map_err(|e| Error::internal(format!("could not start the {what} thread: {e}")))?;
    Ok(Queue {
        sender,
        dropped,
        what,
    })
}
