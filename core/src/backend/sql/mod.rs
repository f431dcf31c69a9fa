//! The SQL lease table on SQLite, PostgreSQL and MySQL/MariaDB: one algorithm
//! ([`table`] for locks, `fence/sql.rs` for fences), with every difference between the
//! databases written down once, in [`dialect`], and the statements built from it in
//! [`mutex_sql`] and [`semaphore_rwlock_sql`] (the fence's in `fence/sql_statements.rs`).
//!
//! The table (docs/design.md §3.5), one row per lock name, kept after release so the token counter
//! survives (the time floor covers a row deleted by an operator):
//!
//! | column | meaning |
//! |---|---|
//! | `name` | the lock name, binary, case- and space-sensitive, primary key |
//! | `owner` | the holder's 16-byte owner id; NULL when free |
//! | `token` | the last fencing token minted for this name |
//! | `expires_at` | when the holder's lease ends, on the database's clock (microseconds) |
//! | `holder` | the holder's description (JSON), NULL when free |
//!
//! | `kind` | while in use as a semaphore or read-write lock, which (`LockKind::as_str`) |
//! | `permits` | a semaphore's N |
//!
//! and a `<table>_meta` table holding `schema_version` and `deployment_id` rows. Semaphores
//! and read-write locks keep their leases and registered waiters in `<table>_leases`
//! ([`semaphore_rwlock`] explains the design; [`semaphore_rwlock_sql`] has its statements, [`semaphore_rwlock_schema`]
//! makes the table and adds the two columns to older tables); [`admin`] inspects, lists and
//! force-releases names of every kind.
//!
//! Modules: [`session`] is the small interface over the three sqlx drivers (pools,
//! connections, transactions, binding and decoding); [`sqlite`], [`postgres`] and [`mysql`]
//! turn a fencelock URL into a pool of that driver (and, for PostgreSQL, the LISTEN
//! connection); [`error`] is the one mapping of driver errors; [`retry`] runs an operation
//! again after a conflict; [`schema`] makes missing tables and reads the meta rows when a
//! Locker connects; [`in_flight`] keeps the acquire attempts still running. This file holds
//! the rest of what they share: names, versions, which database a URL names and the settings
//! every SQL URL takes.

mod admin;
pub(crate) mod conn_pool;
pub(crate) mod dialect;
pub(crate) mod error;
#[cfg(target_os = "linux")]
mod file_watch;
mod in_flight;
mod mutex_sql;
#[cfg(feature = "mysql")]
pub(crate) mod mysql;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
mod renew_batch;
pub(crate) mod retry;
pub(crate) mod schema;
mod semaphore_rwlock;
mod semaphore_rwlock_schema;
pub(crate) mod semaphore_rwlock_sql;
pub(crate) mod session;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;
pub(crate) mod table;
mod wake;

use std::sync::Arc;
use std::time::Duration;

use self::dialect::Flavor;
use self::error::map_sqlx_error;
use crate::error::{Error, Result};
use crate::options::LockerOptions;
use crate::url::{BackendKind, LockerUrl};

pub(crate) use table::SqlBackend;

/// The layout version this build reads and writes. A table with a larger version was made
/// by a newer fencelock and is refused rather than misread.
pub const SCHEMA_VERSION: i64 = 1;

pub const DEFAULT_TABLE: &str = "fencelock_locks";
pub const DEFAULT_FENCE_TABLE: &str = "fencelock_fences";

/// Connections in the statement pool of a PostgreSQL or MySQL Locker (`pool_size=`).
pub const DEFAULT_POOL_SIZE: u32 = 4;

/// Table names are spliced into SQL text, so only plain identifiers are accepted.
pub fn validate_table_name(table: &str) -> Result<(), Error> {
    let mut chars = table.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok
        || table.len() > 48
        || !table.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(Error::invalid(format!(
            "table name {table:?} must be 1-48 characters of A-Z, a-z, 0-9 and _, not starting \
             with a digit"
        )));
    }
    Ok(())
}

pub fn check_schema_version(found: i64, table: &str) -> Result<(), Error> {
    if found > SCHEMA_VERSION {
        return Err(Error::backend(format!(
            "table {table} has layout version {found}, made by a newer fencelock; this one reads \
             version {SCHEMA_VERSION}: upgrade fencelock"
        )));
    }
    Ok(())
}

/// The settings every SQL URL shares: the table, whether to create it, the pool size.
#[derive(Debug, Clone)]
pub(crate) struct SqlSettings {
    pub table: String,
    pub create_table: bool,
    pub pool_size: u32,
    /// MySQL/MariaDB: the pool's sessions run in READ COMMITTED. The lease table's do (its
    /// transactions lock a name's row first and then need no gap locks, which in REPEATABLE
    /// READ would make transactions of neighbouring names wait for, and deadlock with, each
    /// other); a fence's keep the server's isolation, which the caller's statements run in.
    pub read_committed: bool,
}

impl SqlSettings {
    /// Reads the shared options; `known` lists the driver's own (TLS and such), so any other
    /// option is refused by name.
    pub fn from_url(url: &LockerUrl, default_table: &str, known: &[&str]) -> Result<Self, Error> {
        const SHARED: [&str; 3] = ["table", "create_table", "pool_size"];
        let all: Vec<&str> = SHARED.iter().chain(known).copied().collect();
        url.refuse_unknown_options(url.kind.as_str(), &all)?;
        let table = url
            .query
            .get("table")
            .cloned()
            .unwrap_or_else(|| default_table.to_string());
        validate_table_name(&table)?;
        let pool_size = match url.query.get("pool_size") {
            None => DEFAULT_POOL_SIZE,
            Some(n) => n
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=64).contains(n))
                .ok_or_else(|| Error::invalid(format!("pool_size must be 1-64, not {n:?}")))?,
        };
        Ok(SqlSettings {
            table,
            create_table: url.bool_option("create_table", true)?,
            pool_size,
            read_committed: false,
        })
    }
}

/// The database flavor and the URL options it knows besides the shared ones.
pub(crate) fn flavor_of(url: &LockerUrl) -> Result<(Flavor, &'static [&'static str])> {
    match url.kind {
        #[cfg(feature = "sqlite")]
        BackendKind::Sqlite => Ok((Flavor::Sqlite, sqlite::OPTIONS)),
        #[cfg(feature = "postgres")]
        BackendKind::Postgres => Ok((Flavor::Postgres, postgres::OPTIONS)),
        #[cfg(feature = "mysql")]
        BackendKind::MySql => Ok((Flavor::MySql, mysql::OPTIONS)),
        other => Err(Error::internal(format!(
            "{} is not a SQL backend",
            other.as_str()
        ))),
    }
}

/// Opens the statement pool for `url` (a lock table's or a fence's). A server's pool connects
/// lazily and, when the server is unreachable, keeps trying until its timeout and then
/// reports only that; so one connection is made first, by hand, to report at once why the
/// server cannot be reached or refuses us.
pub(crate) async fn open_pool(
    url: &LockerUrl,
    options: &LockerOptions,
    settings: &SqlSettings,
) -> Result<Arc<dyn session::SqlPool>, Error> {
    use sqlx::Connection;
    let context = format!("connecting to {}", url.redacted());
    let timeout = options.operation_timeout;
    let no_answer = || Error::unavailable(format!("{context}: no answer within {timeout:?}"));
    match url.kind {
        #[cfg(feature = "sqlite")]
        BackendKind::Sqlite => Ok(Arc::new(sqlite::open_pool(url, options).await?)),
        #[cfg(feature = "postgres")]
        BackendKind::Postgres => {
            let connect = postgres::connect_options(url, options)?;
            let probe =
                tokio::time::timeout(timeout, sqlx::PgConnection::connect_with(&connect)).await;
            let _ = probe
                .map_err(|_| no_answer())?
                .map_err(|e| map_sqlx_error(&context, e))?
                .close()
                .await;
            Ok(Arc::new(postgres::open_pool(url, options, settings)?))
        }
        #[cfg(feature = "mysql")]
        BackendKind::MySql => {
            let connect = mysql::connect_options(url)?;
            let probe =
                tokio::time::timeout(timeout, sqlx::MySqlConnection::connect_with(&connect)).await;
            let _ = probe
                .map_err(|_| no_answer())?
                .map_err(|e| map_sqlx_error(&context, e))?
                .close()
                .await;
            Ok(Arc::new(mysql::open_pool(url, options, settings)?))
        }
        other => Err(Error::internal(format!(
            "{} is not a SQL backend",
            other.as_str()
        ))),
    }
}

/// A short pause before running a transaction again after a conflict, jittered so the
/// conflicting parties do not meet again.
pub(crate) async fn conflict_pause(attempt: u32) {
    use rand::Rng;
    let base = 2u64 << attempt.min(5);
    let ms = rand::rng().random_range(1..=base);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// 64-bit FNV-1a: stable across builds and platforms, for channel names and lock keys
/// derived from table and lock names (a collision costs a spurious wake-up, nothing more).
pub(crate) fn fnv1a64(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            hash ^= 0xff;
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        for byte in *part {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names() {
        for ok in ["fencelock_locks", "_x", "Locks2"] {
            validate_table_name(ok).unwrap();
        }
        for bad in ["", "2x", "a-b", "x; drop table y", "a.b", &"x".repeat(49)] {
            assert!(validate_table_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn newer_layouts_are_refused() {
        check_schema_version(SCHEMA_VERSION, "t").unwrap();
        let err = check_schema_version(SCHEMA_VERSION + 1, "t").unwrap_err();
        assert!(err.message().contains("newer fencelock"));
    }

    #[test]
    fn settings_refuse_unknown_options_and_bad_pool_sizes() {
        let url =
            LockerUrl::parse("postgres://h/db?table=t1&pool_size=8&create_table=false").unwrap();
        let s = SqlSettings::from_url(&url, DEFAULT_TABLE, &["sslmode"]).unwrap();
        assert_eq!(
            (s.table.as_str(), s.pool_size, s.create_table),
            ("t1", 8, false)
        );
        for bad in [
            "postgres://h/db?tabel=x",
            "postgres://h/db?pool_size=0",
            "postgres://h/db?pool_size=x",
        ] {
            let url = LockerUrl::parse(bad).unwrap();
            let err = SqlSettings::from_url(&url, DEFAULT_TABLE, &["sslmode"]).unwrap_err();
            assert_eq!(
                err.code(),
                crate::error::ErrorCode::InvalidArgument,
                "{bad}"
            );
        }
    }

    #[test]
    fn fnv_is_stable() {
        assert_eq!(fnv1a64(&[b""]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(fnv1a64(&[b"ab", b"c"]), fnv1a64(&[b"a", b"bc"]));
    }
}
