//! Wake-ups for the waiters of a SQLite or MySQL/MariaDB Locker, which have no NOTIFY.
//!
//! Without them a waiter only retries at its poll interval (50 ms ± 50%), so a lock released
//! while its waiter sleeps stays free for half an interval on average. Here one watcher task
//! per Locker reads, for every name its waiters wait on, what the name's row says (the last
//! token, whether it is free or expired, how many shared leases and registered waiters it has:
//! [`super::mutex_sql::LockSql::watch_state`]), on a connection of its own, and wakes a name's
//! waiters when that changes. It reads:
//! - on SQLite on Linux, when the database's write-ahead log changes (inotify,
//!   [`super::file_watch`]): a commit by any process is seen as it happens, and nothing is
//!   read while nothing is written;
//! - elsewhere (MySQL/MariaDB, and SQLite where inotify is not available) every 2 ms, backing
//!   off to every 20 ms while nothing changes; a read is one primary-key lookup per name.
//!
//! A wake-up only makes the waiter try at once; the waiter's own poll stays as the fallback,
//! so a watcher that cannot read (a connection lost, a full inotify table) costs latency,
//! never a wait that does not end. One connection per Locker at most, only while it has
//! waiters (and for a short while after, to serve the next wait without reconnecting); no
//! connection or lock per held or waited name (MariaDB allows 151 connections by default).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::runtime::Handle;
use tokio::sync::{Notify, watch};

use super::dialect::{Args, P, Stmt};
use super::session::{Session, SqlPool, int};
use crate::backend::ReleaseWatch;
use crate::clock::unix_micros;
use crate::name::LockName;
use crate::sql_value::SqlValue;
use crate::sync::unpoisoned;

/// The first poll interval after a change, and the longest while nothing changes.
const POLL_FIRST: Duration = Duration::from_millis(2);
const POLL_MAX: Duration = Duration::from_millis(20);
/// How long the watcher waits after a failed read before it tries again.
const AFTER_FAILURE: Duration = Duration::from_secs(1);
/// How long the watcher keeps its connection (and file watch) with nobody waiting.
const IDLE_KEEP: Duration = Duration::from_secs(30);

/// What makes the watcher read.
#[derive(Debug, Clone)]
pub(crate) enum Trigger {
    /// A change to one of these files (names) of this folder; SQLite on Linux.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Files {
        folder: std::path::PathBuf,
        files: Vec<std::ffi::OsString>,
    },
    /// A timer.
    Poll,
}

/// What a name's row says, as far as its waiters care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RowState {
    token: Option<i64>,
    free: bool,
    /// Shared leases and registered waiters.
    shared_rows: i64,
}

/// The waiters of one name.
struct Waited {
    watchers: usize,
    /// The state last read; `None` until the first read after the first waiter came.
    seen: Option<Option<RowState>>,
    wake: watch::Sender<()>,
}

#[derive(Default)]
struct Registry {
    names: HashMap<LockName, Waited>,
    started: bool,
    closed: bool,
}

struct Shared {
    registry: Mutex<Registry>,
    /// Wakes the watcher task: a name added, or the Locker closing.
    kick: Notify,
}

/// One Locker's watcher (see the module header).
pub(super) struct Waker {
    shared: Arc<Shared>,
    pool: Arc<dyn SqlPool>,
    state: Stmt,
    trigger: Trigger,
    runtime: Handle,
}

impl Waker {
    /// `state` is the lease table's [`super::mutex_sql::LockSql::watch_state`].
    pub fn new(pool: Arc<dyn SqlPool>, state: Stmt, trigger: Trigger, runtime: Handle) -> Self {
        Waker {
            shared: Arc::new(Shared {
                registry: Mutex::default(),
                kick: Notify::new(),
            }),
            pool,
            state,
            trigger,
            runtime,
        }
    }

    /// A watch that returns when `name`'s row changes; the watcher reads it from now on.
    pub fn watch(&self, name: &LockName) -> Box<dyn ReleaseWatch> {
        let (woken, start) = {
            let mut registry = unpoisoned(&self.shared.registry);
            if registry.closed {
                return Box::new(crate::backend::PollOnly);
            }
            let waited = registry
                .names
                .entry(name.clone())
                .or_insert_with(|| Waited {
                    watchers: 0,
                    seen: None,
                    wake: watch::channel(()).0,
                });
            waited.watchers += 1;
            let woken = waited.wake.subscribe();
            (woken, !std::mem::replace(&mut registry.started, true))
        };
        if start {
            let task = run(
                self.shared.clone(),
                self.pool.clone(),
                self.state.clone(),
                self.trigger.clone(),
            );
            let spawned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.runtime.spawn(task);
            }));
            if spawned.is_err() {
                flog!(warn, "cannot start the wake-up watcher; waiters poll");
            }
        }
        self.shared.kick.notify_one();
        Box::new(RowWatch {
            woken,
            registration: Registration {
                shared: self.shared.clone(),
                name: name.clone(),
            },
        })
    }

    /// Ends the watcher; watches made later only poll.
    pub fn close(&self) {
        let mut registry = unpoisoned(&self.shared.registry);
        registry.closed = true;
        registry.names.clear();
        drop(registry);
        self.shared.kick.notify_one();
    }
}

impl Drop for Waker {
    fn drop(&mut self) {
        self.close();
    }
}

/// One waiter's place among a name's watchers, given up when its watch is dropped.
struct Registration {
    shared: Arc<Shared>,
    name: LockName,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut registry = unpoisoned(&self.shared.registry);
        if let Some(waited) = registry.names.get_mut(&self.name) {
            waited.watchers -= 1;
            if waited.watchers == 0 {
                registry.names.remove(&self.name);
            }
        }
    }
}

struct RowWatch {
    woken: watch::Receiver<()>,
    #[allow(dead_code, reason = "held for its Drop")]
    registration: Registration,
}

#[async_trait]
impl ReleaseWatch for RowWatch {
    async fn wait(&mut self, max: Duration) {
        let sleep = tokio::time::sleep(max);
        tokio::pin!(sleep);
        tokio::select! {
            changed = self.woken.changed() => {
                // The watcher closed: only the poll is left.
                if changed.is_err() {
                    sleep.await;
                }
            }
            _ = &mut sleep => {}
        }
    }
}

/// What the watcher holds while it has work: its connection and its file watch.
#[derive(Default)]
struct Resources {
    session: Option<Box<dyn Session>>,
    #[cfg(target_os = "linux")]
    files: Option<super::file_watch::FileWatch>,
    /// inotify failed once: the timer from then on.
    files_failed: bool,
}

/// After a change to the database's files, when to read again (then twice as long after
/// that, up to [`FOLLOW_UP_LAST`]): SQLite writes a commit to the log before it publishes it
/// in the log's index (shared memory, which makes no file event), so the read right after the
/// event may still see the table as it was.
const FOLLOW_UP_FIRST: Duration = Duration::from_millis(1);
const FOLLOW_UP_LAST: Duration = Duration::from_millis(64);

/// The watcher task: reads the waited names' rows and wakes their waiters when a row changes,
/// until the Locker closes or drops its [`Waker`].
async fn run(shared: Arc<Shared>, pool: Arc<dyn SqlPool>, state: Stmt, trigger: Trigger) {
    let mut held = Resources::default();
    let mut interval = POLL_FIRST;
    let mut follow_up: Option<Duration> = None;
    loop {
        let names: Vec<LockName> = {
            let registry = unpoisoned(&shared.registry);
            if registry.closed {
                return;
            }
            registry.names.keys().cloned().collect()
        };
        if names.is_empty() {
            if tokio::time::timeout(IDLE_KEEP, shared.kick.notified())
                .await
                .is_err()
            {
                held = Resources {
                    files_failed: held.files_failed,
                    ..Resources::default()
                };
                shared.kick.notified().await;
            }
            continue;
        }
        #[cfg(target_os = "linux")]
        if let Trigger::Files { folder, files } = &trigger
            && held.files.is_none()
            && !held.files_failed
        {
            // Watching starts before the read below, so no commit after the read is missed.
            match super::file_watch::FileWatch::new(folder, files.clone()) {
                Ok(watch) => held.files = Some(watch),
                Err(e) => {
                    flog!(
                        warn,
                        "cannot watch the sqlite database's files ({e}); waiters are woken by a \
                         2-20 ms poll instead"
                    );
                    held.files_failed = true;
                }
            }
        }
        let changed = match read(&shared, &pool, &state, &names, &mut held.session).await {
            Ok(changed) => changed,
            Err(e) => {
                flog!(
                    debug,
                    "the wake-up watcher cannot read the lease table: {e}"
                );
                held.session = None;
                let _ = tokio::time::timeout(AFTER_FAILURE, shared.kick.notified()).await;
                continue;
            }
        };
        interval = if changed {
            POLL_FIRST
        } else {
            (interval * 5 / 4).min(POLL_MAX)
        };
        #[cfg(target_os = "linux")]
        if let Some(files) = held.files.as_mut() {
            let again = follow_up.take();
            tokio::select! {
                seen = files.changed() => match seen {
                    Ok(()) => follow_up = Some(FOLLOW_UP_FIRST),
                    Err(e) => {
                        flog!(warn, "watching the sqlite database's files failed ({e}); polling instead");
                        held.files = None;
                        held.files_failed = true;
                    }
                },
                _ = shared.kick.notified() => follow_up = again,
                _ = sleep_or_never(again) => {
                    follow_up = again.map(|after| after * 2).filter(|after| *after <= FOLLOW_UP_LAST);
                }
            }
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shared.kick.notified() => {}
        }
    }
}

/// Sleeps for `duration`, or forever when there is none.
async fn sleep_or_never(duration: Option<Duration>) {
    match duration {
        Some(duration) => tokio::time::sleep(duration).await,
        None => std::future::pending().await,
    }
}

/// Reads each name's row and wakes the waiters of those that changed (or, at a name's first
/// read, that look free: the release may have come between the waiter's attempt and this
/// read). Whether anything changed.
async fn read(
    shared: &Shared,
    pool: &Arc<dyn SqlPool>,
    state: &Stmt,
    names: &[LockName],
    session: &mut Option<Box<dyn Session>>,
) -> Result<bool, sqlx::Error> {
    let session = match session {
        Some(session) => session,
        None => session.insert(pool.detached().await?),
    };
    let mut changed = false;
    for name in names {
        let args = Args::new()
            .with(P::Name, SqlValue::Bytes(name.as_str().as_bytes().to_vec()))
            .with(P::Now, SqlValue::Int(unix_micros()));
        // Read to the end, so SQLite's read transaction ends with the statement rather than
        // staying open (and holding back checkpoints) until the next read.
        let row = session
            .fetch_all(&state.sql, state.bind(&args)?, &state.cols)
            .await?
            .into_iter()
            .next();
        let now = row.map(|row| RowState {
            token: int(&row, 0),
            free: int(&row, 1) == Some(1),
            shared_rows: int(&row, 2).unwrap_or(0),
        });
        let mut registry = unpoisoned(&shared.registry);
        let Some(waited) = registry.names.get_mut(name) else {
            continue;
        };
        let wake = match waited.seen {
            None => now.is_none_or(|row| row.free || row.shared_rows > 0),
            Some(before) => before != now,
        };
        waited.seen = Some(now);
        if wake {
            changed = true;
            waited.wake.send_replace(());
        }
    }
    Ok(changed)
}
