//! SQLite for the SQL lease table and fence: the embedded default, needing no server. The
//! algorithm is the one every SQL database shares (`table.rs`); this opens the file.
//!
//! Several processes on one machine share one file safely: WAL journal, a busy timeout, and
//! every write in a `BEGIN IMMEDIATE` transaction (a read-then-write in a deferred
//! transaction can fail with a busy snapshot under WAL whatever the timeout). The "server
//! clock" is this machine's wall clock, read inside the write transaction, in microseconds.
//! SQLite has no notifications across processes: waiters are woken by a watch on the
//! database's write-ahead log ([`super::wake`]).

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};

use super::conn_pool::{ConnPool, PoolSettings};
use super::error::map_sqlx_error;
use super::session::Pooled;
use crate::error::{Error, Result};
use crate::options::LockerOptions;
use crate::url::LockerUrl;

/// The SQLite URL options besides the shared ones (`table`, `create_table`).
pub(crate) const OPTIONS: &[&str] = &["mode", "busy_timeout_ms"];

/// Opens (and unless told otherwise creates) a SQLite database for fencelock's tables:
/// shared by the lock backend and the SQLite fence.
pub(crate) async fn open_pool(
    url: &LockerUrl,
    options: &LockerOptions,
) -> Result<Pooled<sqlx::Sqlite>> {
    let path = plain_file_path(
        &url.sqlite_path()
            .ok_or_else(|| Error::internal("not a sqlite URL"))?,
    );
    let read_only = match url.query.get("mode").map(String::as_str) {
        None | Some("rwc") | Some("rw") => false,
        Some("ro") => true,
        Some(other) => {
            return Err(Error::invalid(format!(
                "sqlite mode must be ro, rw or rwc, not {other:?}"
            )));
        }
    };
    let busy_timeout = url
        .millis_option("busy_timeout_ms", Duration::ZERO..=Duration::from_secs(600))?
        .unwrap_or(Duration::from_secs(5));
    check_folder(&path)?;
    if read_only && !path.exists() {
        return Err(Error::invalid(format!(
            "sqlite database {} does not exist (mode=ro does not create it)",
            path.display()
        )));
    }
    let mut connect = SqliteConnectOptions::from_str("sqlite://")
        .map_err(|e| Error::internal(format!("sqlite options: {e}")))?
        .filename(&path)
        .create_if_missing(!read_only)
        .read_only(read_only)
        .busy_timeout(busy_timeout)
        .synchronous(SqliteSynchronous::Normal);
    if !read_only {
        connect = connect.journal_mode(SqliteJournalMode::Wal);
    }
    // Switching a new file to WAL takes an exclusive lock, and SQLite answers BUSY at once,
    // without its busy handler, when several processes open one new file together: try again
    // for up to the operation timeout.
    let pool = ConnPool::new(PoolSettings {
        connect,
        setup: Vec::new(),
        size: 2,
        acquire_timeout: options.operation_timeout,
        ping_after: None,
    });
    let started = std::time::Instant::now();
    loop {
        match pool.open_one().await {
            Ok(()) => break,
            Err(e) if is_busy(&e) && started.elapsed() < options.operation_timeout => {
                let pause: u64 = rand::Rng::random_range(&mut rand::rng(), 5..50);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            Err(e) => {
                return Err(map_sqlx_error(
                    &format!("opening sqlite database {}", path.display()),
                    e,
                ));
            }
        }
    }
    // Writes take the write lock first: a read-then-write in a deferred transaction can fail
    // with a busy snapshot under WAL whatever the busy timeout.
    Ok(Pooled {
        pool,
        begin_sql: Some("BEGIN IMMEDIATE"),
    })
}

/// What wakes this database's waiters ([`super::wake`]): a change to its write-ahead log (or
/// to the file itself), in its folder, named as the database was opened.
pub(crate) fn wake_trigger(url: &LockerUrl) -> Result<super::wake::Trigger> {
    let path = plain_file_path(
        &url.sqlite_path()
            .ok_or_else(|| Error::internal("not a sqlite URL"))?,
    );
    let folder = match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => folder.to_path_buf(),
        _ => Path::new(".").to_path_buf(),
    };
    // Absolute now: the watch is made later, after the process may have changed folder.
    let folder = std::fs::canonicalize(&folder).unwrap_or(folder);
    let Some(file) = path.file_name() else {
        return Ok(super::wake::Trigger::Poll);
    };
    let mut wal = file.to_os_string();
    wal.push("-wal");
    Ok(super::wake::Trigger::Files {
        folder,
        files: vec![wal, file.to_os_string()],
    })
}

/// The path as a plain file name. SQLite (opened with SQLITE_OPEN_URI) reads a name that starts
/// with `file:` as a URI whose parameters (`nolock=1`, `vfs=unix-none`, `mode=memory`) would turn
/// off cross-process locking or make the database private; `./file:…` is just a file. A URL's
/// own options (`mode=ro`, `table=`, …) are fencelock's, applied above.
fn plain_file_path(path: &Path) -> std::path::PathBuf {
    if path.as_os_str().as_encoded_bytes().starts_with(b"file:") {
        Path::new(".").join(path)
    } else {
        path.to_path_buf()
    }
}

/// SQLITE_BUSY or SQLITE_LOCKED, with or without an extended code.
fn is_busy(error: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = error else {
        return false;
    };
    db.code()
        .and_then(|code| code.parse::<i32>().ok())
        .is_some_and(|code| matches!(code & 0xff, 5 | 6))
}

fn check_folder(path: &Path) -> Result<()> {
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => return Ok(()),
    };
    if !folder.is_dir() {
        return Err(Error::invalid(format!(
            "the folder {} of sqlite database {} does not exist; create it first",
            folder.display(),
            path.display()
        )));
    }
    Ok(())
}
