//! The SQL fence on SQLite: a `fencelock_fences` table in the database the caller writes to,
//! so the token check and the caller's statements commit or roll back together.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteArguments, SqlitePool};
use sqlx::{AssertSqlSafe, Arguments, Row};

use super::{FenceBackend, FenceToken, SqlValue, Statement};
use crate::backend::sql::{self, map_sqlx_error};
use crate::backend::sqlite::open_pool;
use crate::error::{Error, Result};
use crate::options::LockerOptions;
use crate::url::LockerUrl;

pub(crate) struct SqliteFence {
    pool: SqlitePool,
    seed: Arc<str>,
    select: Arc<str>,
    set_lock: Arc<str>,
    advance: Arc<str>,
}

impl SqliteFence {
    pub(crate) async fn open(url: &LockerUrl, options: &LockerOptions) -> Result<Self> {
        let t = url.query.get("table").map(String::as_str).unwrap_or(sql::DEFAULT_FENCE_TABLE);
        sql::validate_table_name(t)?;
        let create = sql::create_table_option(url.query.get("create_table"))?;
        let pool = open_pool(url, options).await?;
        if create {
            let ddl = format!(
                "CREATE TABLE IF NOT EXISTS {t} (resource BLOB NOT NULL PRIMARY KEY, \
                 token INTEGER NOT NULL, lock_key TEXT) WITHOUT ROWID"
            );
            let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(|e| map_sqlx_error("creating the fence table", e))?;
            sqlx::query(AssertSqlSafe(ddl))
                .execute(&mut *tx)
                .await
                .map_err(|e| map_sqlx_error("creating the fence table", e))?;
            tx.commit().await.map_err(|e| map_sqlx_error("creating the fence table", e))?;
        }
        Ok(SqliteFence {
            pool,
            seed: format!("INSERT INTO {t} (resource, token, lock_key) VALUES (?1, -1, NULL) ON CONFLICT (resource) DO NOTHING").into(),
            select: format!("SELECT token, lock_key FROM {t} WHERE resource = ?1").into(),
            set_lock: format!("UPDATE {t} SET lock_key = ?2 WHERE resource = ?1").into(),
            advance: format!("UPDATE {t} SET token = ?2 WHERE resource = ?1 AND token <= ?2").into(),
        })
    }

    async fn read(&self, conn: &mut sqlx::SqliteConnection, resource: &str) -> Result<Option<(i64, Option<String>)>> {
        let row = sqlx::query(AssertSqlSafe(self.select.clone()))
            .bind(resource.as_bytes())
            .fetch_optional(conn)
            .await
            .map_err(|e| map_sqlx_error("reading the fence", e))?;
        Ok(row.map(|r| (r.get::<i64, _>(0), r.get::<Option<String>, _>(1))))
    }
}

fn check_lock(stored: Option<&str>, token: &FenceToken) -> Result<()> {
    if let (Some(stored), Some(lock)) = (stored, &token.lock) {
        if stored != lock.key() {
            return Err(Error::invalid(format!(
                "this fence guards another lock; a token of lock {:?} is not ordered with its tokens",
                lock.name
            )));
        }
    }
    Ok(())
}

fn bind_all(statement: &Statement) -> Result<SqliteArguments> {
    let mut args = SqliteArguments::default();
    for value in &statement.params {
        let added = match value {
            SqlValue::Null => args.add(Option::<i64>::None),
            SqlValue::Int(v) => args.add(*v),
            SqlValue::Float(v) => args.add(*v),
            SqlValue::Text(v) => args.add(v.clone()),
            SqlValue::Bytes(v) => args.add(v.clone()),
        };
        added.map_err(|e| Error::invalid(format!("cannot bind a statement parameter: {e}")))?;
    }
    Ok(args)
}

#[async_trait]
impl FenceBackend for SqliteFence {
    async fn fenced_execute(&self, resource: &str, token: &FenceToken, statements: &[Statement]) -> Result<Vec<u64>> {
        let ctx = "fenced write";
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await.map_err(|e| map_sqlx_error(ctx, e))?;
        sqlx::query(AssertSqlSafe(self.seed.clone()))
            .bind(resource.as_bytes())
            .execute(&mut *tx)
            .await
            .map_err(|e| map_sqlx_error(ctx, e))?;
        let (_, stored_lock) = self.read(&mut tx, resource).await?.unwrap_or((-1, None));
        check_lock(stored_lock.as_deref(), token)?;
        if stored_lock.is_none() {
            if let Some(lock) = &token.lock {
                sqlx::query(AssertSqlSafe(self.set_lock.clone()))
                    .bind(resource.as_bytes())
                    .bind(lock.key())
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| map_sqlx_error(ctx, e))?;
            }
        }
        let advanced = sqlx::query(AssertSqlSafe(self.advance.clone()))
            .bind(resource.as_bytes())
            .bind(token.token as i64)
            .execute(&mut *tx)
            .await
            .map_err(|e| map_sqlx_error(ctx, e))?;
        if advanced.rows_affected() != 1 {
            // Dropping the transaction rolls it back.
            return Err(Error::stale_token(format!(
                "fence {resource:?} has accepted a newer token than {}",
                token.token
            )));
        }
        let mut affected = Vec::with_capacity(statements.len());
        for (i, statement) in statements.iter().enumerate() {
            let args = bind_all(statement)?;
            let done = sqlx::query_with(AssertSqlSafe(statement.sql.clone()), args)
                .execute(&mut *tx)
                .await
                .map_err(|e| {
                    let err = map_sqlx_error(&format!("statement {} of the fenced write", i + 1), e);
                    Error::new(err.code(), format!("{}; nothing was written", err.message()))
                })?;
            affected.push(done.rows_affected());
        }
        tx.commit().await.map_err(|e| map_sqlx_error(ctx, e))?;
        Ok(affected)
    }

    async fn check(&self, resource: &str, token: &FenceToken) -> Result<()> {
        let mut conn = self.pool.acquire().await.map_err(|e| map_sqlx_error("fence check", e))?;
        let Some((highest, stored_lock)) = self.read(&mut conn, resource).await? else {
            return Ok(());
        };
        check_lock(stored_lock.as_deref(), token)?;
        if (token.token as i64) < highest {
            return Err(Error::stale_token(format!(
                "fence {resource:?} has accepted token {highest}, newer than {}",
                token.token
            )));
        }
        Ok(())
    }

    async fn highest(&self, resource: &str) -> Result<Option<u64>> {
        let mut conn = self.pool.acquire().await.map_err(|e| map_sqlx_error("fence read", e))?;
        Ok(self.read(&mut conn, resource).await?.and_then(|(t, _)| (t >= 0).then_some(t as u64)))
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}
