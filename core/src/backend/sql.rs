//! What every SQL lease table shares, whatever the database: the layout, its version,
//! table-name rules and the mapping of driver errors.
//!
//! The table (design §3), one row per lock name, kept after release so the token counter
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

use crate::error::Error;
use crate::url::redact_secrets;

/// The layout version this build reads and writes. A table with a larger version was made
/// by a newer fencelock and is refused rather than misread.
pub const SCHEMA_VERSION: i64 = 1;

pub const DEFAULT_TABLE: &str = "fencelock_locks";
pub const DEFAULT_FENCE_TABLE: &str = "fencelock_fences";

/// Table names are spliced into SQL text, so only plain identifiers are accepted.
pub fn validate_table_name(table: &str) -> Result<(), Error> {
    let mut chars = table.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
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
    match value.map(|v| v.to_ascii_lowercase()) {
        None => Ok(true),
        Some(v) if v == "true" || v == "1" || v == "yes" => Ok(true),
        Some(v) if v == "false" || v == "0" || v == "no" => Ok(false),
        Some(v) => Err(Error::invalid(format!("create_table must be true or false, not {v:?}"))),
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

/// Converts a driver error into fencelock's, deciding retryability and stripping secrets.
pub fn map_sqlx_error(context: &str, err: sqlx::Error) -> Error {
    match &err {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            let message = redact_secrets(db.message());
            // SQLite primary result codes are the low byte of the extended code.
            let sqlite_primary = code.parse::<i32>().ok().map(|c| c & 0xff);
            match sqlite_primary {
                Some(5) | Some(6) => {
                    return Error::unavailable(format!("{context}: database is busy: {message}"));
                }
                Some(8) => {
                    return Error::backend(format!(
                        "{context}: the database is read-only; fencelock must write its lease \
                         table ({message})"
                    ));
                }
                Some(14) => {
                    return Error::backend(format!("{context}: cannot open the database file ({message})"));
                }
                _ => {}
            }
            if message.contains("no such table") {
                return Error::backend(format!(
                    "{context}: {message}; create it, or let fencelock create it (create_table=true)"
                ));
            }
            Error::backend(format!("{context}: {message} (code {code})"))
        }
        sqlx::Error::Io(e) => Error::unavailable(format!("{context}: {}", redact_secrets(&e.to_string()))),
        sqlx::Error::PoolTimedOut => Error::unavailable(format!("{context}: no database connection free in time")),
        sqlx::Error::PoolClosed => Error::closed(format!("{context}: the locker was closed")),
        other => Error::backend(format!("{context}: {}", redact_secrets(&other.to_string()))),
    }
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
}
