//! The SQL lease table on SQLite, PostgreSQL and MySQL/MariaDB: one algorithm
//! ([`table`] for locks, `fence/sql.rs` for fences), with every difference between the
//! databases written down once, in [`dialect`].
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
//! and a `<table>_meta` table holding `schema_version` and `deployment_id` rows.
//!
//! Modules: [`session`] is the small interface over the three sqlx drivers (pools,
//! connections, transactions, binding and decoding); [`sqlite`], [`postgres`] and [`mysql`]
//! turn a fencelock URL into a pool of that driver (and, for PostgreSQL, the LISTEN
//! connection); this file holds what they share: names, versions and the one mapping of
//! driver errors.

pub(crate) mod dialect;
pub(crate) mod mysql;
pub(crate) mod postgres;
pub(crate) mod session;
pub(crate) mod sqlite;
pub(crate) mod table;

use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::options::LockerOptions;
use crate::url::{BackendKind, LockerUrl, redact_secrets};

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

/// Reads a `create_table` URL option: true unless `false`/`0`/`no`.
pub fn create_table_option(value: Option<&String>) -> Result<bool, Error> {
    bool_option("create_table", value, true)
}

pub(crate) fn bool_option(key: &str, value: Option<&String>, default: bool) -> Result<bool, Error> {
    match value.map(|v| v.to_ascii_lowercase()) {
        None => Ok(default),
        Some(v) if v == "true" || v == "1" || v == "yes" => Ok(true),
        Some(v) if v == "false" || v == "0" || v == "no" => Ok(false),
        Some(v) => Err(Error::invalid(format!(
            "{key} must be true or false, not {v:?}"
        ))),
    }
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
}

impl SqlSettings {
    /// Reads the shared options; `known` lists the driver's own (TLS and such), so any other
    /// option is refused by name.
    pub fn from_url(url: &LockerUrl, default_table: &str, known: &[&str]) -> Result<Self, Error> {
        const SHARED: [&str; 3] = ["table", "create_table", "pool_size"];
        for key in url.query.keys() {
            if !SHARED.contains(&key.as_str()) && !known.contains(&key.as_str()) {
                let mut all: Vec<&str> = SHARED.iter().chain(known).copied().collect();
                all.sort_unstable();
                return Err(Error::invalid(format!(
                    "unknown {} URL option {key:?}; known: {}",
                    url.kind.as_str(),
                    all.join(", ")
                )));
            }
        }
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
            create_table: create_table_option(url.query.get("create_table"))?,
            pool_size,
        })
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
        BackendKind::Sqlite => Ok(Arc::new(sqlite::open_pool(url, options).await?)),
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

/// An error a driver reports, by database.
enum DbCode {
    /// A PostgreSQL SQLSTATE.
    Postgres(String),
    /// A MySQL/MariaDB error number.
    MySql(u16),
    /// A SQLite primary result code.
    Sqlite(i32),
    Unknown(String),
}

fn db_code(db: &dyn sqlx::error::DatabaseError) -> DbCode {
    if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        return DbCode::Postgres(pg.code().to_string());
    }
    if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return DbCode::MySql(my.number());
    }
    let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
    if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        // SQLite primary result codes are the low byte of the extended code.
        if let Ok(c) = code.parse::<i32>() {
            return DbCode::Sqlite(c & 0xff);
        }
    }
    DbCode::Unknown(code)
}

/// A deadlock or serialization failure: the database rolled the transaction back, so the
/// whole operation may be run again at once.
pub(crate) fn is_conflict(err: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = err else {
        return false;
    };
    match db_code(db.as_ref()) {
        DbCode::Postgres(c) => c == "40001" || c == "40P01",
        // 1020 (ER_CHECKREAD): MariaDB 11.6+ with innodb_snapshot_isolation (its default), a row
        // changed since the transaction's snapshot; the transaction is rolled back like a deadlock.
        DbCode::MySql(n) => n == 1213 || n == 1020,
        _ => false,
    }
}

/// Another session created the same table or type at the same moment (PostgreSQL's
/// `CREATE TABLE IF NOT EXISTS` is not safe against itself without a lock).
pub(crate) fn is_duplicate_create(err: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = err else {
        return false;
    };
    match db_code(db.as_ref()) {
        DbCode::Postgres(c) => matches!(c.as_str(), "23505" | "42P07" | "42710"),
        DbCode::MySql(n) => n == 1050,
        _ => db.message().contains("already exists"),
    }
}

/// The statement names a table that does not exist.
pub(crate) fn is_missing_table(err: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = err else {
        return false;
    };
    match db_code(db.as_ref()) {
        DbCode::Postgres(c) => c == "42P01",
        DbCode::MySql(n) => n == 1146,
        _ => db.message().contains("no such table"),
    }
}

/// Converts a driver error into fencelock's, deciding retryability and stripping secrets.
/// The one place SQLite result codes, PostgreSQL SQLSTATEs and MySQL error numbers are read.
pub fn map_sqlx_error(context: &str, err: sqlx::Error) -> Error {
    match &err {
        sqlx::Error::Database(db) => {
            let message = redact_secrets(db.message());
            match db_code(db.as_ref()) {
                DbCode::Postgres(code) => map_postgres(context, &code, &message),
                DbCode::MySql(number) => map_mysql(context, number, &message),
                DbCode::Sqlite(code) => map_sqlite(context, code, &message),
                DbCode::Unknown(code) => {
                    Error::backend(format!("{context}: {message} (code {code})"))
                }
            }
        }
        sqlx::Error::Io(e) => Error::unavailable(format!(
            "{context}: connection failed: {}",
            redact_secrets(&e.to_string())
        )),
        sqlx::Error::Tls(e) => Error::backend(format!(
            "{context}: TLS failed: {}",
            redact_secrets(&e.to_string())
        )),
        sqlx::Error::PoolTimedOut => Error::unavailable(format!(
            "{context}: no database connection in time (the server is unreachable, or every \
             connection of the pool is busy)"
        )),
        sqlx::Error::PoolClosed => Error::closed(format!("{context}: the locker was closed")),
        sqlx::Error::WorkerCrashed => {
            Error::unavailable(format!("{context}: the database worker stopped"))
        }
        sqlx::Error::Configuration(e) => {
            Error::invalid(format!("{context}: {}", redact_secrets(&e.to_string())))
        }
        sqlx::Error::InvalidArgument(e) => {
            Error::invalid(format!("{context}: {}", redact_secrets(e)))
        }
        sqlx::Error::Encode(e) => Error::invalid(format!(
            "{context}: cannot bind a statement parameter: {}",
            redact_secrets(&e.to_string())
        )),
        other => Error::backend(format!("{context}: {}", redact_secrets(&other.to_string()))),
    }
}

fn map_postgres(context: &str, code: &str, message: &str) -> Error {
    match code {
        // invalid_password, invalid_authorization_specification
        "28P01" | "28000" => Error::auth(format!("{context}: {message}")),
        // insufficient_privilege
        "42501" => Error::auth(format!("{context}: permission denied: {message}")),
        // deadlock_detected, serialization_failure: the transaction was rolled back
        "40P01" | "40001" => Error::unavailable(format!(
            "{context}: conflict with a concurrent transaction, rolled back; retry ({message})"
        )),
        // lock_not_available (lock_timeout), query_canceled (statement timeout)
        "55P03" | "57014" => Error::unavailable(format!(
            "{context}: timed out waiting for a lock: {message}"
        )),
        // admin_shutdown, crash_shutdown, cannot_connect_now, idle_session_timeout
        "57P01" | "57P02" | "57P03" | "57P05" => Error::unavailable(format!(
            "{context}: the server is restarting or shutting down: {message}"
        )),
        "25006" => Error::backend(format!(
            "{context}: the server is read-only (a standby?); fencelock must write its table ({message})"
        )),
        // connection_exception (08…), insufficient_resources (53…: too many connections)
        c if c.starts_with("08") || c.starts_with("53") => {
            Error::unavailable(format!("{context}: {message} (SQLSTATE {c})"))
        }
        c => Error::backend(format!("{context}: {message} (SQLSTATE {c})")),
    }
}

fn map_mysql(context: &str, number: u16, message: &str) -> Error {
    match number {
        // access denied: bad password, no rights to the database, command or table
        1044 | 1045 | 1142 | 1143 | 1227 | 1370 | 1698 => {
            Error::auth(format!("{context}: {message} (error {number})"))
        }
        1213 => Error::unavailable(format!(
            "{context}: deadlock with a concurrent transaction, rolled back; retry ({message})"
        )),
        1020 => Error::unavailable(format!(
            "{context}: a row changed since the transaction's snapshot (snapshot isolation), \
             rolled back; retry ({message})"
        )),
        1205 => Error::unavailable(format!(
            "{context}: timed out waiting for a row lock ({message})"
        )),
        1290 | 1792 => Error::backend(format!(
            "{context}: the server is read-only; fencelock must write its table ({message})"
        )),
        // too many connections, server shutdown, aborted or killed connection, network errors
        1040 | 1053 | 1077 | 1152 | 1153 | 1158..=1161 | 1927 | 4031 => {
            Error::unavailable(format!("{context}: {message} (error {number})"))
        }
        n => Error::backend(format!("{context}: {message} (error {n})")),
    }
}

fn map_sqlite(context: &str, code: i32, message: &str) -> Error {
    match code {
        5 | 6 => Error::unavailable(format!("{context}: database is busy: {message}")),
        8 => Error::backend(format!(
            "{context}: the database is read-only; fencelock must write its lease table ({message})"
        )),
        14 => Error::backend(format!(
            "{context}: cannot open the database file ({message})"
        )),
        c => Error::backend(format!("{context}: {message} (code {c})")),
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
            assert_eq!(err.code(), crate::ErrorCode::InvalidArgument, "{bad}");
        }
    }

    #[test]
    fn error_classes() {
        assert_eq!(
            map_postgres("x", "28P01", "m").code(),
            crate::ErrorCode::Auth
        );
        assert!(map_postgres("x", "40P01", "m").is_retryable());
        assert!(map_postgres("x", "08006", "m").is_retryable());
        assert!(map_postgres("x", "57P01", "m").is_retryable());
        assert!(!map_postgres("x", "23502", "m").is_retryable());
        assert_eq!(map_mysql("x", 1045, "m").code(), crate::ErrorCode::Auth);
        assert!(map_mysql("x", 1213, "m").is_retryable());
        assert!(map_mysql("x", 1020, "m").is_retryable());
        assert!(map_mysql("x", 1205, "m").is_retryable());
        assert!(!map_mysql("x", 1064, "m").is_retryable());
        assert!(map_sqlite("x", 5, "m").is_retryable());
    }

    #[test]
    fn fnv_is_stable() {
        assert_eq!(fnv1a64(&[b""]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(fnv1a64(&[b"ab", b"c"]), fnv1a64(&[b"a", b"bc"]));
    }
}
