//! SQLite for the SQL lease table and fence: the embedded default, needing no server. The
//! algorithm is the one every SQL database shares (`table.rs`); this opens the file.
//!
//! Several processes on one machine share one file safely: WAL journal, a busy timeout, and
//! every write in a `BEGIN IMMEDIATE` transaction (a read-then-write in a deferred
//! transaction can fail with a busy snapshot under WAL whatever the timeout). The "server
//! clock" is this machine's wall clock, read inside the write transaction, in microseconds.
//! Waiting polls with jitter (SQLite has no notifications across processes).

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::map_sqlx_error;
use super::session::Pooled;
use crate::error::{Error, Result};
use crate::options::LockerOptions;
use crate::url::LockerUrl;

/// The SQLite URL options besides the shared ones (`table`, `create_table`).
pub(crate) const OPTIONS: &[&str] = &["mode", "busy_timeout_ms"];

/// Opens (and unless told otherwise creates) a SQLite database for fencelock's tables:
/// shared by the lock backend and the SQLite fence.
pub(crate) async fn open_pool(url: &LockerUrl, options: &LockerOptions) -> Result<Pooled<sqlx::Sqlite>> {
    let path = url.sqlite_path().ok_or_else(|| Error::internal("not a sqlite URL"))?;
    let read_only = match url.query.get("mode").map(String::as_str) {
        None | Some("rwc") | Some("rw") => false,
        Some("ro") => true,
        Some(other) => {
            return Err(Error::invalid(format!("sqlite mode must be ro, rw or rwc, not {other:?}")));
        }
    };
    let busy_timeout = match url.query.get("busy_timeout_ms") {
        None => Duration::from_secs(5),
        Some(ms) => Duration::from_millis(ms.parse::<u64>().ok().filter(|ms| *ms <= 600_000).ok_or_else(
            || Error::invalid(format!("busy_timeout_ms must be 0-600000, not {ms:?}")),
        )?),
    };
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
    let pool = SqlitePoolOptions::new()
        .max_connections(2)
        .acquire_timeout(options.operation_timeout)
        .connect_with(connect)
        .await
        .map_err(|e| map_sqlx_error(&format!("opening sqlite database {}", path.display()), e))?;
    // Writes take the write lock first: a read-then-write in a deferred transaction can fail
    // with a busy snapshot under WAL whatever the busy timeout.
    Ok(Pooled { pool, begin_sql: Some("BEGIN IMMEDIATE") })
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

