//! Lifecycle events and log records for the JVM.
//!
//! The core queues both (see its `events` and `logs` modules); this module only hands the
//! queues to Kotlin. A JVM thread of the Kotlin layer drains each queue (a listener's thread,
//! the `fencelock-logging` thread), or a coroutine awaits it: no JVM code ever runs on a
//! renewal task or the deadline watchdog.

use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use fencelock::{
    EventSubscription, LockEvent, LockEventKind, LogLevel, LogRecord, LogSubscription,
};

use crate::error::{NativeError, guard};
use crate::lease::NativeLossReason;
use crate::runtime::{OnDrop, run};

/// What happened to a lease (the core's `LockEventKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum NativeLockEventKind {
    Acquired,
    Renewed,
    RenewalRetried,
    Suspended,
    Resumed,
    Lost,
    Released,
    DeploymentMismatch,
}

impl NativeLockEventKind {
    /// None for a kind the core added and this library does not know yet (the unit test
    /// below fails first).
    fn from_core(kind: LockEventKind) -> Option<Self> {
        Some(match kind {
            LockEventKind::Acquired => NativeLockEventKind::Acquired,
            LockEventKind::Renewed => NativeLockEventKind::Renewed,
            LockEventKind::RenewalRetried => NativeLockEventKind::RenewalRetried,
            LockEventKind::Suspended => NativeLockEventKind::Suspended,
            LockEventKind::Resumed => NativeLockEventKind::Resumed,
            LockEventKind::Lost => NativeLockEventKind::Lost,
            LockEventKind::Released => NativeLockEventKind::Released,
            LockEventKind::DeploymentMismatch => NativeLockEventKind::DeploymentMismatch,
            _ => return None,
        })
    }
}

/// One thing that happened to one lease.
#[derive(Debug, Clone, uniffi::Record)]
pub struct NativeLockEvent {
    pub kind: NativeLockEventKind,
    pub name: String,
    /// The lease's fencing token (below 2^63).
    pub token: i64,
    /// `redis`, `redlock`, `zookeeper`, `postgres`, `mysql` or `sqlite`.
    pub backend: String,
    pub at: SystemTime,
    /// Why: the error of a retried renewal, the cause of a suspension or a loss.
    pub reason: Option<String>,
    pub loss: Option<NativeLossReason>,
}

impl NativeLockEvent {
    fn from_core(event: LockEvent) -> Option<Self> {
        Some(NativeLockEvent {
            kind: NativeLockEventKind::from_core(event.kind)?,
            name: event.name,
            token: event.token as i64,
            backend: event.backend.as_str().to_string(),
            at: event.at,
            reason: event.reason,
            loss: event.loss.map(Into::into),
        })
    }
}

/// A subscription to one Locker's events (`NativeLocker::subscribe`).
#[derive(uniffi::Object)]
pub struct NativeEventSubscription {
    inner: Arc<EventSubscription>,
}

impl NativeEventSubscription {
    pub(crate) fn new(subscription: EventSubscription) -> Arc<Self> {
        Arc::new(NativeEventSubscription {
            inner: Arc::new(subscription),
        })
    }
}

#[uniffi::export]
impl NativeEventSubscription {
    /// The next event, waiting up to `timeout` (forever when absent); none on timeout or once
    /// the subscription ended and its queue is drained. Blocks the calling JVM thread.
    pub fn recv_blocking(
        &self,
        timeout: Option<Duration>,
    ) -> Result<Option<NativeLockEvent>, NativeError> {
        guard(|| {
            let deadline = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
            loop {
                let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
                match self.inner.recv_blocking(left) {
                    None => return Ok(None),
                    Some(event) => {
                        if let Some(event) = NativeLockEvent::from_core(event) {
                            return Ok(Some(event));
                        }
                    }
                }
            }
        })
    }

    /// The next event; none once the subscription ended and its queue is drained. A cancelled
    /// caller loses nothing: the event stays queued.
    pub async fn recv(&self) -> Result<Option<NativeLockEvent>, NativeError> {
        let inner = self.inner.clone();
        run(
            async move {
                loop {
                    match inner.recv().await {
                        None => return Ok(None),
                        Some(event) => {
                            if let Some(event) = NativeLockEvent::from_core(event) {
                                return Ok(Some(event));
                            }
                        }
                    }
                }
            },
            OnDrop::Cancel,
        )
        .await
    }

    /// Ends the subscription; queued events can still be received, then receiving answers
    /// none. (Not `close`: uniffi objects already have one, which frees the native handle.)
    pub fn unsubscribe(&self) {
        self.inner.close();
    }

    pub fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// How many events were dropped because too many waited unread.
    pub fn dropped(&self) -> u64 {
        self.inner.dropped()
    }
}

/// A log record's severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum NativeLogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl From<NativeLogLevel> for LogLevel {
    fn from(level: NativeLogLevel) -> Self {
        match level {
            NativeLogLevel::Error => LogLevel::Error,
            NativeLogLevel::Warn => LogLevel::Warn,
            NativeLogLevel::Info => LogLevel::Info,
            NativeLogLevel::Debug => LogLevel::Debug,
            NativeLogLevel::Trace => LogLevel::Trace,
        }
    }
}

impl From<LogLevel> for NativeLogLevel {
    fn from(level: LogLevel) -> Self {
        match level {
            LogLevel::Error => NativeLogLevel::Error,
            LogLevel::Warn => NativeLogLevel::Warn,
            LogLevel::Info => NativeLogLevel::Info,
            LogLevel::Debug => NativeLogLevel::Debug,
            LogLevel::Trace => NativeLogLevel::Trace,
        }
    }
}

/// One log record. The message names the lock when there is one, and never holds credentials.
#[derive(Debug, Clone, uniffi::Record)]
pub struct NativeLogRecord {
    pub level: NativeLogLevel,
    pub message: String,
    /// The lock the record is about, if any.
    pub lock: Option<String>,
    pub at: SystemTime,
    /// The number of the call it was produced during (the Kotlin layer's, see spans.rs), 0 for
    /// none.
    pub caller: u32,
}

impl From<LogRecord> for NativeLogRecord {
    fn from(r: LogRecord) -> Self {
        NativeLogRecord {
            caller: fencelock::spans::numbered::number(r.caller.as_ref()),
            level: r.level.into(),
            message: r.message,
            lock: r.lock,
            at: r.at,
        }
    }
}

/// A process-wide subscription to fencelock's log records at a level and above.
#[derive(uniffi::Object)]
pub struct NativeLogSubscription {
    // Receiving and changing the level share it; only unsubscribing takes it alone.
    inner: RwLock<LogSubscription>,
}

/// Subscribes to the log records of `level` and more severe ones.
#[uniffi::export]
pub fn subscribe_logs(level: NativeLogLevel) -> Arc<NativeLogSubscription> {
    Arc::new(NativeLogSubscription {
        inner: RwLock::new(fencelock::logs::subscribe(level.into())),
    })
}

#[uniffi::export]
impl NativeLogSubscription {
    /// The next record, waiting up to `timeout` (forever when absent); none on timeout or once
    /// unsubscribed. Blocks the calling JVM thread.
    pub fn recv_blocking(
        &self,
        timeout: Option<Duration>,
    ) -> Result<Option<NativeLogRecord>, NativeError> {
        guard(|| {
            let sub = self.inner.read().unwrap_or_else(|e| e.into_inner());
            Ok(sub.recv_blocking(timeout).map(NativeLogRecord::from))
        })
    }

    /// Changes the level received (the JVM logger's level changed).
    pub fn set_level(&self, level: NativeLogLevel) {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .set_level(level.into());
    }

    /// Ends the subscription (waits for a receive in progress to return).
    pub fn unsubscribe(&self) {
        self.inner
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .close();
    }

    pub fn dropped(&self) -> u64 {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .dropped()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_core_event_kind_has_a_jvm_kind() {
        for kind in LockEventKind::ALL {
            let ours = NativeLockEventKind::from_core(kind).unwrap_or_else(|| {
                panic!("event kind {kind} has no NativeLockEventKind: add it here and in Events.kt")
            });
            // The Kotlin enum's names are the spellings in upper case (Events.kt).
            assert_eq!(
                format!("{ours:?}").to_ascii_lowercase(),
                kind.as_str().replace('_', "")
            );
        }
    }

    #[test]
    fn log_levels_round_trip() {
        for level in [
            LogLevel::Error,
            LogLevel::Warn,
            LogLevel::Info,
            LogLevel::Debug,
            LogLevel::Trace,
        ] {
            assert_eq!(LogLevel::from(NativeLogLevel::from(level)), level);
        }
    }
}
