//! From sqlx errors to fencelock's: the one place SQLite result codes, PostgreSQL SQLSTATEs
//! and MySQL/MariaDB error numbers are read, for the mapping ([`map_sqlx_error`]) and for the
//! questions the table's retry loops ask of an error (a conflict, a concurrent create, a
//! missing table).

use crate::error::{DriverCause, Error};
use crate::url::redact_secrets;

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
    // Each driver's error type exists only in a build with its feature.
    #[cfg(feature = "postgres")]
    if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        return DbCode::Postgres(pg.code().to_string());
    }
    #[cfg(feature = "mysql")]
    if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return DbCode::MySql(my.number());
    }
    let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
    #[cfg(feature = "sqlite")]
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

/// The statement names a column the table does not have (made before the column existed).
pub(crate) fn is_missing_column(err: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = err else {
        return false;
    };
    match db_code(db.as_ref()) {
        DbCode::Postgres(c) => c == "42703",
        DbCode::MySql(n) => n == 1054,
        _ => db.message().contains("no such column"),
    }
}

/// The database refused a write in a read-only session ([`super::session::SqlPool::read_only`]).
pub(crate) fn is_read_only_refusal(err: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = err else {
        return false;
    };
    match db_code(db.as_ref()) {
        // read_only_sql_transaction
        DbCode::Postgres(c) => c == "25006",
        // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
        DbCode::MySql(n) => n == 1792,
        // SQLITE_READONLY
        DbCode::Sqlite(c) => c == 8,
        DbCode::Unknown(_) => false,
    }
}

/// Converts a driver error into fencelock's, deciding retryability, stripping secrets and
/// keeping the driver's error as the cause. The one place SQLite result codes, PostgreSQL
/// SQLSTATEs and MySQL error numbers are read.
pub fn map_sqlx_error(context: &str, err: sqlx::Error) -> Error {
    let (error, cause) = match &err {
        sqlx::Error::Database(db) => {
            let message = redact_secrets(db.message());
            let (error, driver, code) = match db_code(db.as_ref()) {
                DbCode::Postgres(code) => {
                    (map_postgres(context, &code, &message), "postgres", code)
                }
                DbCode::MySql(number) => (
                    map_mysql(context, number, &message),
                    "mysql",
                    number.to_string(),
                ),
                DbCode::Sqlite(code) => (
                    map_sqlite(context, code, &message),
                    "sqlite",
                    code.to_string(),
                ),
                DbCode::Unknown(code) => (
                    Error::backend(format!("{context}: {message} (code {code})")),
                    "sql",
                    code,
                ),
            };
            (error, DriverCause::new(driver, code, message))
        }
        other => {
            let text = redact_secrets(&other.to_string());
            // No database answered: the driver (sqlx) names the kind of failure.
            let kind = DriverCause::variant_name(other);
            (
                map_client_failure(context, other),
                DriverCause::new("sql", kind, text),
            )
        }
    };
    error.with_cause(cause)
}

/// A failure of the driver itself, without a database's answer.
fn map_client_failure(context: &str, err: &sqlx::Error) -> Error {
    match err {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_classes() {
        assert_eq!(
            map_postgres("x", "28P01", "m").code(),
            crate::error::ErrorCode::Auth
        );
        assert!(map_postgres("x", "40P01", "m").is_retryable());
        assert!(map_postgres("x", "08006", "m").is_retryable());
        assert!(map_postgres("x", "57P01", "m").is_retryable());
        assert!(!map_postgres("x", "23502", "m").is_retryable());
        assert_eq!(
            map_mysql("x", 1045, "m").code(),
            crate::error::ErrorCode::Auth
        );
        assert!(map_mysql("x", 1213, "m").is_retryable());
        assert!(map_mysql("x", 1020, "m").is_retryable());
        assert!(map_mysql("x", 1205, "m").is_retryable());
        assert!(!map_mysql("x", 1064, "m").is_retryable());
        assert!(map_sqlite("x", 5, "m").is_retryable());
    }
}
