//! fencelock's log records, for Rust's `tracing` and for each binding's own logging.
//!
//! Every record is emitted twice, cheaply: as a `tracing` event with target `fencelock` (a
//! Rust application sees it through whatever subscriber it installed), and, only when some
//! binding subscribed at that level, as a [`LogRecord`] pushed into that binding's queue
//! ([`subscribe`]). A binding drains the queue on a thread of its own and hands the records to
//! Python's `logging`, a Node callback or the JVM's SLF4J: no host-language code runs on the
//! thread that logs (a renewal task, the deadline watchdog), and with no subscriber at a
//! level, a record of that level costs one atomic load besides `tracing`'s own check.
//!
//! The subscriber list is process-wide, like a logging configuration.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime};

use crate::inbox::{Hub, Membership};

/// A record's severity, most severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
    Trace = 5,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "ERROR",
            LogLevel::Warn => "WARN",
            LogLevel::Info => "INFO",
            LogLevel::Debug => "DEBUG",
            LogLevel::Trace => "TRACE",
        }
    }

    /// Parses `error`, `warn`/`warning`, `info`, `debug`, `trace` (any case).
    pub fn parse(text: &str) -> Option<LogLevel> {
        Some(match text.to_ascii_lowercase().as_str() {
            "error" => LogLevel::Error,
            "warn" | "warning" => LogLevel::Warn,
            "info" => LogLevel::Info,
            "debug" => LogLevel::Debug,
            "trace" => LogLevel::Trace,
            _ => return None,
        })
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub level: LogLevel,
    /// Always `fencelock`: the logger name bindings use.
    pub target: &'static str,
    /// The message; it names the lock when there is one. Never contains credentials.
    pub message: String,
    /// The lock the record is about, if any.
    pub lock: Option<String>,
    pub at: SystemTime,
    /// The context of the user call the record was produced under (acquire, extend, release,
    /// close, ...), as its binding captured it ([`crate::spans::in_caller_context`]), so the
    /// binding can log it under that context (MDC, contextvars, AsyncLocalStorage); none for
    /// what the core does on its own (renewals, background releases).
    pub caller: Option<crate::spans::CallerContext>,
}

type LogHub = Hub<LogRecord, LogLevel>;

static HUB: LazyLock<Arc<LogHub>> = LazyLock::new(|| Arc::new(Hub::new()));
/// The most verbose level any subscriber wants (0: nobody subscribed).
static MAX_LEVEL: AtomicU8 = AtomicU8::new(0);

/// Whether some subscriber wants records of `level`.
#[inline]
pub fn enabled(level: LogLevel) -> bool {
    level as u8 <= MAX_LEVEL.load(Ordering::Relaxed)
}

fn recompute_max_level() {
    let max = HUB
        .filters()
        .into_iter()
        .map(|l| l as u8)
        .max()
        .unwrap_or(0);
    MAX_LEVEL.store(max, Ordering::Relaxed);
}

/// Pushes a record to every subscriber that wants its level (call through `flog!`, which
/// checks [`enabled`] first).
pub fn emit(level: LogLevel, lock: Option<String>, message: fmt::Arguments<'_>) {
    let message = match &lock {
        Some(name) => format!("lock {name:?}: {message}"),
        None => message.to_string(),
    };
    let record = LogRecord {
        level,
        target: "fencelock",
        message,
        lock,
        at: SystemTime::now(),
        caller: crate::spans::caller_context(),
    };
    HUB.publish(&record, |wanted| level <= *wanted);
}

/// Subscribes to the records of `level` and more severe ones, process-wide. Dropping the
/// subscription (or [`LogSubscription::close`]) ends it.
pub fn subscribe(level: LogLevel) -> LogSubscription {
    let (id, inbox) = HUB.subscribe(level);
    recompute_max_level();
    LogSubscription {
        membership: Some(Membership {
            id,
            inbox,
            hub: Arc::downgrade(&HUB),
        }),
    }
}

/// The receiving end of [`subscribe`].
pub struct LogSubscription {
    membership: Option<Membership<LogRecord, LogLevel>>,
}

impl LogSubscription {
    /// The next record, waiting up to `timeout` (forever when `None`); blocks the calling
    /// thread. `None` on timeout or once closed and drained.
    pub fn recv_blocking(&self, timeout: Option<Duration>) -> Option<LogRecord> {
        self.membership.as_ref()?.inbox.recv_blocking(timeout)
    }

    /// The next record; `None` once closed and drained.
    pub async fn recv(&self) -> Option<LogRecord> {
        self.membership.as_ref()?.inbox.recv().await
    }

    pub fn try_recv(&self) -> Option<LogRecord> {
        self.membership.as_ref()?.inbox.try_recv()
    }

    /// Changes the level this subscription receives (a host's logger level changed).
    pub fn set_level(&self, level: LogLevel) {
        if let Some(m) = &self.membership {
            HUB.set_filter(m.id, level);
            recompute_max_level();
        }
    }

    /// How many records were dropped unread (see [`crate::INBOX_CAPACITY`]).
    pub fn dropped(&self) -> u64 {
        self.membership.as_ref().map_or(0, |m| m.inbox.dropped())
    }

    pub fn close(&mut self) {
        drop(self.membership.take());
        recompute_max_level();
    }
}

impl Drop for LogSubscription {
    fn drop(&mut self) {
        self.close();
    }
}

impl fmt::Debug for LogSubscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogSubscription").finish_non_exhaustive()
    }
}

/// Logs through `tracing` (target `fencelock`) and to the binding subscribers of [`crate::logs`]:
/// `flog!(warn, "text {x}")`, or `flog!(warn, lock = name, "text")` for a record about a lock.
macro_rules! flog {
    (@tracing error) => { ::tracing::Level::ERROR };
    (@tracing warn) => { ::tracing::Level::WARN };
    (@tracing info) => { ::tracing::Level::INFO };
    (@tracing debug) => { ::tracing::Level::DEBUG };
    (@ours error) => { $crate::logs::LogLevel::Error };
    (@ours warn) => { $crate::logs::LogLevel::Warn };
    (@ours info) => { $crate::logs::LogLevel::Info };
    (@ours debug) => { $crate::logs::LogLevel::Debug };
    ($lvl:ident, lock = $lock:expr, $($arg:tt)+) => {{
        ::tracing::event!(target: "fencelock", flog!(@tracing $lvl), lock = %$lock, $($arg)+);
        if $crate::logs::enabled(flog!(@ours $lvl)) {
            $crate::logs::emit(flog!(@ours $lvl), Some($lock.to_string()), format_args!($($arg)+));
        }
    }};
    ($lvl:ident, $($arg:tt)+) => {{
        ::tracing::event!(target: "fencelock", flog!(@tracing $lvl), $($arg)+);
        if $crate::logs::enabled(flog!(@ours $lvl)) {
            $crate::logs::emit(flog!(@ours $lvl), None, format_args!($($arg)+));
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_reach_subscribers_at_their_level_only() {
        let mut sub = subscribe(LogLevel::Warn);
        assert!(enabled(LogLevel::Warn));
        flog!(debug, "not wanted {}", 1);
        flog!(warn, lock = "job", "wanted {}", 2);
        let got = sub.recv_blocking(Some(Duration::from_secs(1))).unwrap();
        assert_eq!(got.level, LogLevel::Warn);
        assert_eq!(got.lock.as_deref(), Some("job"));
        assert_eq!(got.message, "lock \"job\": wanted 2");
        assert_eq!(sub.try_recv(), None);
        sub.set_level(LogLevel::Debug);
        flog!(debug, "now wanted");
        assert_eq!(
            sub.recv_blocking(Some(Duration::from_secs(1)))
                .unwrap()
                .message,
            "now wanted"
        );
        sub.close();
        assert_eq!(LogLevel::parse("WARNING"), Some(LogLevel::Warn));
    }
}
