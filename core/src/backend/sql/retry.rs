//! Running one SQL operation again when the database rolled its transaction back for a
//! deadlock or serialization failure, and turning what finally fails into fencelock's error.
//! Shared by the lease table (`table.rs`) and the fence (`fence/sql.rs`), so both retry alike
//! and both name a table dropped while in use.

use super::conflict_pause;
use super::error::{is_conflict, is_missing_table, map_sqlx_error};
use crate::error::{Error, Result};

/// A failure inside one SQL operation: a driver error (mapped, or retried when it is a
/// conflict) or fencelock's own verdict.
pub(crate) enum OpError {
    Sql(sqlx::Error),
    Fail(Error),
}

impl From<sqlx::Error> for OpError {
    fn from(e: sqlx::Error) -> Self {
        OpError::Sql(e)
    }
}

impl From<Error> for OpError {
    fn from(e: Error) -> Self {
        OpError::Fail(e)
    }
}

/// Runs `op`, again after a deadlock or serialization failure (the database rolled it back),
/// and maps what finally fails. A missing `table` (dropped while in use) is named.
pub(crate) async fn with_conflict_retries<T, F, Fut>(context: &str, table: &str, op: F) -> Result<T>
where
    F: Fn() -> Fut,
    Fut: Future<Output = std::result::Result<T, OpError>>,
{
    let mut attempt = 0;
    loop {
        match op().await {
            Ok(value) => return Ok(value),
            Err(OpError::Sql(e)) if is_conflict(&e) && attempt < 5 => {
                attempt += 1;
                flog!(
                    debug,
                    "{context}: conflict with a concurrent transaction, retrying"
                );
                conflict_pause(attempt).await;
            }
            Err(OpError::Sql(e)) if is_missing_table(&e) => {
                let err = map_sqlx_error(context, e);
                return Err(Error::backend(format!(
                    "{}; fencelock's table {table} is missing: create it (docs/sql.md) or let fencelock \
                     create it (create_table=true)",
                    err.message()
                ))
                .with_cause_of(&err));
            }
            Err(OpError::Sql(e)) => return Err(map_sqlx_error(context, e)),
            Err(OpError::Fail(e)) => return Err(e),
        }
    }
}
