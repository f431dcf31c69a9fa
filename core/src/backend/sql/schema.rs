//! Making the lease or fence tables when they are missing, and reading the lease table's meta
//! rows: what connecting does once, before any lock operation (`table.rs`). The fence
//! (`fence/sql.rs`) makes its table with the same [`ensure_tables`].

use super::conflict_pause;
use super::dialect::{Args, P, SchemaSql};
use super::error::{is_duplicate_create, is_missing_table, map_sqlx_error};
use super::mutex_sql::LockSql;
use super::session::{SqlPool, int, text};
use crate::error::{Error, Result};
use crate::sql_value::SqlValue;

/// Creates the tables of `schema` unless they exist (or checks that they exist, when the
/// user turned creation off). Safe when several processes start at once: creators are
/// serialized by the database (`BEGIN IMMEDIATE`, `pg_advisory_xact_lock`, `GET_LOCK`), and a
/// creator that still meets a half-made duplicate (another tool's, or an older fencelock's)
/// tries again.
pub(crate) async fn ensure_tables(
    pool: &dyn SqlPool,
    schema: &SchemaSql,
    create: bool,
    args: Args,
    what: &str,
) -> Result<()> {
    let mut args = args
        .with(
            P::Table,
            SqlValue::Text(schema.tables.first().cloned().unwrap_or_default()),
        )
        .with(P::Guard, schema.guard_key.clone())
        .with(P::GuardTimeout, SqlValue::Int(schema.guard_timeout));
    if let Some(meta) = schema.tables.get(1) {
        args.set(P::Meta, SqlValue::Text(meta.clone()));
    }
    let names = match schema.tables.as_slice() {
        [table, meta] => format!("{table} (with {meta})"),
        tables => tables.join(", "),
    };
    let context = format!("creating the {what} {names}");
    let mut attempt = 0;
    loop {
        let existing = count_existing(pool, schema, &args)
            .await
            .map_err(|e| map_sqlx_error(&context, e))?;
        if existing >= schema.tables.len() as i64 {
            return Ok(());
        }
        if !create {
            return Err(Error::backend(format!(
                "the {what} {names} does not exist and create_table=false; create it (docs/sql.md \
                 has the statements) or let fencelock create it"
            )));
        }
        match create_once(pool, schema, &args).await {
            Ok(()) => return Ok(()),
            Err(e) if is_duplicate_create(&e) && attempt < 5 => {
                attempt += 1;
                flog!(
                    debug,
                    "{context}: another process created it at the same moment; checking again"
                );
                conflict_pause(attempt).await;
            }
            Err(e) => {
                let err = map_sqlx_error(&context, e);
                if err.code() == crate::error::ErrorCode::Auth {
                    return Err(Error::auth(format!(
                        "{}; a role that may not create tables needs them made first by their owner \
                         (docs/sql.md), and create_table=false",
                        err.message()
                    ))
                    .with_cause_of(&err));
                }
                return Err(err);
            }
        }
    }
}

async fn count_existing(
    pool: &dyn SqlPool,
    schema: &SchemaSql,
    args: &Args,
) -> std::result::Result<i64, sqlx::Error> {
    let mut conn = pool.connection().await?;
    let row = conn
        .fetch_optional(
            &schema.exists.sql,
            schema.exists.bind(args)?,
            &schema.exists.cols,
        )
        .await?;
    Ok(row.and_then(|r| int(&r, 0)).unwrap_or(0))
}

async fn create_once(
    pool: &dyn SqlPool,
    schema: &SchemaSql,
    args: &Args,
) -> std::result::Result<(), sqlx::Error> {
    let mut session = if schema.in_tx {
        pool.begin().await?
    } else {
        pool.connection().await?
    };
    if let Some(guard) = &schema.guard {
        session
            .fetch_optional(&guard.sql, guard.bind(args)?, &guard.cols)
            .await?;
    }
    let mut result = Ok(());
    for stmt in &schema.create {
        if let Err(e) = session.execute(&stmt.sql, stmt.bind(args)?).await {
            result = Err(e);
            break;
        }
    }
    if let Some(unguard) = &schema.unguard {
        // Session-level (MySQL GET_LOCK): released even when the creation failed.
        let _ = session
            .fetch_optional(&unguard.sql, unguard.bind(args)?, &unguard.cols)
            .await;
    }
    match result {
        Ok(()) => session.commit().await,
        Err(e) => {
            let _ = session.rollback().await;
            Err(e)
        }
    }
}

/// Reads the layout version and deployment id from `<table>_meta`. When its rows are missing
/// and fencelock may create the table, they are written first (`seed`): another process made
/// the tables a moment ago and has not written them yet (MySQL commits each DDL statement by
/// itself, so the tables are visible before their rows), or the tables were made by hand. The
/// insert keeps whichever rows land first, so every process reads the same deployment id.
pub(super) async fn read_meta(
    pool: &dyn SqlPool,
    sql: &LockSql,
    seed: Option<&Args>,
) -> Result<String> {
    let t = &sql.table;
    let read = || async {
        let mut conn = pool.connection().await?;
        let row = conn
            .fetch_optional(
                &sql.read_meta.sql,
                sql.read_meta.bind(&Args::new())?,
                &sql.read_meta.cols,
            )
            .await?;
        Ok::<_, sqlx::Error>(row.unwrap_or_default())
    };
    let explain = |e: sqlx::Error| {
        if is_missing_table(&e) {
            Error::backend(format!(
                "the lease table {t} (with {t}_meta) does not exist; create it (docs/sql.md) or let \
                 fencelock create it (create_table=true)"
            ))
        } else {
            map_sqlx_error("reading the lease table's version", e)
        }
    };
    let mut row = read().await.map_err(explain)?;
    if let Some(args) = seed
        && (text(&row, 0).is_none() || text(&row, 1).is_none())
    {
        let write = async {
            let mut conn = pool.connection().await?;
            conn.execute(&sql.seed_meta.sql, sql.seed_meta.bind(args)?)
                .await
        };
        write
            .await
            .map_err(|e| map_sqlx_error(&format!("writing the first rows of {t}_meta"), e))?;
        row = read().await.map_err(explain)?;
    }
    let version = text(&row, 0)
        .and_then(|v| v.parse::<i64>().ok())
        .ok_or_else(|| Error::backend(format!("{t}_meta has no schema_version row")))?;
    super::check_schema_version(version, t)?;
    text(&row, 1).ok_or_else(|| Error::backend(format!("{t}_meta has no deployment_id row")))
}
