//! Lifecycle events and log records for Node: the core queues them, a thread of this module
//! drains the queue and hands each item to a threadsafe function, which runs the JS callback on
//! the JS thread. No JS runs on a renewal task or the deadline watchdog, and the callbacks are
//! held weakly (they do not keep the process alive).
//!
//! Both queues are bounded. napi's queue holds at most [`JS_QUEUE`] items and the thread waits
//! while it is full (napi would refuse the newest item); meanwhile the core's queue (10,000
//! items) drops its oldest and counts them, so a JS thread that stops taking items costs a
//! bounded amount of memory, and what is dropped is the oldest, counted in `dropped`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use fencelock::{EventSubscription, LockEvent, LogLevel, LogRecord, LogSubscription};
use napi::bindgen_prelude::*;
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi_derive::napi;

use crate::error::{Result, from_napi, guard, invalid, to_js};

/// The most items napi queues for the JS thread per callback.
pub(crate) const JS_QUEUE: usize = 1024;

fn epoch_ms(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

/// One lifecycle event; the token is a decimal string (`index.js` makes it a bigint).
#[napi(object)]
pub struct NativeLockEvent {
    /// "acquired", "renewed", "renewal_retried", "suspended", "resumed", "lost", "released",
    /// "deployment_mismatch".
    pub kind: String,
    pub name: String,
    pub token: String,
    pub backend: String,
    /// ms since the epoch.
    pub timestamp: f64,
    pub reason: Option<String>,
}

impl From<LockEvent> for NativeLockEvent {
    fn from(e: LockEvent) -> Self {
        NativeLockEvent {
            kind: e.kind.as_str().to_string(),
            name: e.name,
            token: e.token.to_string(),
            backend: e.backend.as_str().to_string(),
            timestamp: epoch_ms(e.at),
            reason: e.reason,
        }
    }
}

/// A running event subscription; `close()` stops it (closing the Locker does too).
#[napi]
pub struct NativeEventSubscription {
    inner: Arc<EventSubscription>,
}

#[napi]
impl NativeEventSubscription {
    /// How many events were dropped (the oldest) because too many waited for the JS thread.
    #[napi(getter)]
    pub fn dropped(&self) -> f64 {
        self.inner.dropped() as f64
    }

    #[napi]
    pub fn close(&self) -> Result<()> {
        guard(|| {
            self.inner.close();
            Ok(())
        })
    }
}

/// Starts delivering `subscription`'s events to `callback` on the JS thread.
pub(crate) fn deliver_events(
    subscription: EventSubscription,
    callback: Function<'_, NativeLockEvent, ()>,
) -> Result<NativeEventSubscription> {
    let tsfn = callback
        .build_threadsafe_function::<NativeLockEvent>()
        .callee_handled::<false>()
        .weak::<true>()
        .max_queue_size::<JS_QUEUE>()
        .build()
        .map_err(from_napi)?;
    let inner = Arc::new(subscription);
    let drained = inner.clone();
    std::thread::Builder::new()
        .name("fencelock-events".into())
        .spawn(move || {
            while let Some(event) = drained.recv_blocking(None) {
                // Blocking: waits while napi's queue is full (see the module's docs).
                tsfn.call(
                    NativeLockEvent::from(event),
                    ThreadsafeFunctionCallMode::Blocking,
                );
            }
        })
        .map_err(|e| {
            to_js(fencelock::Error::internal(format!(
                "cannot start the event thread: {e}"
            )))
        })?;
    Ok(NativeEventSubscription { inner })
}

/// One log record.
#[napi(object)]
pub struct NativeLogRecord {
    /// "error", "warn", "info" or "debug".
    pub level: String,
    pub message: String,
    pub lock: Option<String>,
    /// ms since the epoch.
    pub timestamp: f64,
    /// The number of the call it was produced during (`index.js`'s, see spans.rs), 0 for none.
    pub caller: u32,
}

impl From<LogRecord> for NativeLogRecord {
    fn from(r: LogRecord) -> Self {
        NativeLogRecord {
            caller: fencelock::spans::numbered::number(r.caller.as_ref()),
            level: r.level.as_str().to_ascii_lowercase(),
            message: r.message,
            lock: r.lock,
            timestamp: epoch_ms(r.at),
        }
    }
}

/// The process's logger: its subscription (the thread ends when it is closed).
static LOGGER: Mutex<Option<Arc<Mutex<LogSubscription>>>> = Mutex::new(None);

/// How many records the current logger dropped (its thread copies the count after each wait:
/// reading it through the subscription would wait on that thread's lock).
static LOG_DROPPED: AtomicU64 = AtomicU64::new(0);

/// How many log records the current logger dropped (the oldest) because too many waited for
/// the JS thread.
#[napi(js_name = "droppedLogRecords")]
pub fn dropped_log_records() -> f64 {
    LOG_DROPPED.load(Ordering::Relaxed) as f64
}

fn stop_logger() {
    let old = LOGGER.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(old) = old {
        old.lock().unwrap_or_else(|e| e.into_inner()).close();
    }
}

/// Sends fencelock's log records at `level` ("error", "warn", "info", "debug") and above to
/// `callback`, process-wide, replacing any logger set before; `null` stops logging.
#[napi(js_name = "setLogger")]
pub fn set_logger(
    callback: Option<Function<'_, NativeLogRecord, ()>>,
    level: Option<String>,
) -> Result<()> {
    guard(|| {
        let level = match level.as_deref() {
            None => LogLevel::Info,
            Some(text) => LogLevel::parse(text)
                .filter(|l| *l != LogLevel::Trace)
                .ok_or_else(|| {
                    invalid(format!(
                        "logLevel must be error, warn, info or debug, not {text:?}"
                    ))
                })?,
        };
        stop_logger();
        let Some(callback) = callback else {
            return Ok(());
        };
        let tsfn = callback
            .build_threadsafe_function::<NativeLogRecord>()
            .callee_handled::<false>()
            .weak::<true>()
            .max_queue_size::<JS_QUEUE>()
            .build()
            .map_err(from_napi)?;
        LOG_DROPPED.store(0, Ordering::Relaxed);
        let subscription = Arc::new(Mutex::new(fencelock::logs::subscribe(level)));
        let drained = subscription.clone();
        std::thread::Builder::new()
            .name("fencelock-logging".into())
            .spawn(move || {
                loop {
                    // Waits in slices so a replaced logger's thread notices it was closed.
                    let record = {
                        let sub = drained.lock().unwrap_or_else(|e| e.into_inner());
                        let record = sub.recv_blocking(Some(std::time::Duration::from_millis(200)));
                        LOG_DROPPED.store(sub.dropped(), Ordering::Relaxed);
                        record
                    };
                    match record {
                        Some(record) => {
                            // Blocking: waits while napi's queue is full (see the module's docs).
                            tsfn.call(
                                NativeLogRecord::from(record),
                                ThreadsafeFunctionCallMode::Blocking,
                            );
                        }
                        None if Arc::strong_count(&drained) == 1 => return,
                        None => {}
                    }
                }
            })
            .map_err(|e| {
                to_js(fencelock::Error::internal(format!(
                    "cannot start the logging thread: {e}"
                )))
            })?;
        *LOGGER.lock().unwrap_or_else(|e| e.into_inner()) = Some(subscription);
        Ok(())
    })
}
