//! The SQL fence, on SQLite, PostgreSQL and MySQL/MariaDB: a `fencelock_fences` table in the
//! database the caller writes to, so the token check and the caller's statements commit or
//! roll back together. The statements come from [`super::sql_statements`].
//!
//! `fenced_execute` runs in one transaction of fencelock's own: lock the resource's row
//! (`SELECT … FOR UPDATE`; SQLite's `BEGIN IMMEDIATE` already holds the write lock), record
//! which lock the fence guards on first use, `UPDATE … SET token = :t WHERE resource = :r
//! AND token <= :t`, then the caller's statements; if the update matched nothing it rolls
//! back with STALE_TOKEN, and a failing statement rolls back everything, the token included.
//! A resource's row is created on first use by an autocommit insert, outside the transaction.

use std::sync::Arc;

use async_trait::async_trait;

use super::origins::{Judgement, Origins};
use super::sql_statements::FenceSql;
use super::{FenceBackend, FenceToken, LockMatch, SqlValue, Statement};
use crate::backend::sql::dialect::{Args, P};
use crate::backend::sql::error::{is_conflict, is_read_only_refusal, map_sqlx_error};
use crate::backend::sql::retry::{OpError, with_conflict_retries};
use crate::backend::sql::schema::ensure_tables;
use crate::backend::sql::session::{Row, Session, SqlPool, int, text};
use crate::backend::sql::{self, SqlSettings, flavor_of};
use crate::error::{Error, Result};
use crate::options::LockerOptions;
use crate::url::LockerUrl;

pub(crate) struct SqlFence {
    pool: Arc<dyn SqlPool>,
    sql: FenceSql,
    table: String,
}

impl SqlFence {
    pub(crate) async fn open(url: &LockerUrl, options: &LockerOptions) -> Result<Self> {
        let (flavor, known) = flavor_of(url)?;
        let settings = SqlSettings::from_url(url, sql::DEFAULT_FENCE_TABLE, known)?;
        let mut fence_sql =
            FenceSql::new(flavor, &settings.table, options.operation_timeout, true)?;
        let pool = sql::open_pool(url, options, &settings).await?;
        if let Err(e) = ensure_tables(
            pool.as_ref(),
            &fence_sql.schema,
            settings.create_table,
            Args::new(),
            "fence table",
        )
        .await
        {
            pool.close().await;
            return Err(e);
        }
        if !has_origins_column(pool.as_ref(), &fence_sql, settings.create_table).await {
            flog!(
                warn,
                "the fence table {} has no origins column (made before it existed, and                  create_table=false): fences on it cannot warn of two servers behind one address                  (docs/sql.md has the ALTER TABLE statement)",
                settings.table
            );
            fence_sql = FenceSql::new(flavor, &settings.table, options.operation_timeout, false)?;
        }
        Ok(SqlFence {
            pool,
            sql: fence_sql,
            table: settings.table,
        })
    }

    fn args(resource: &str) -> Args {
        Args::new().with(P::Resource, SqlValue::Bytes(resource.as_bytes().to_vec()))
    }

    /// The resource's row, read without locking.
    async fn read(&self, resource: &str) -> std::result::Result<Option<Record>, OpError> {
        let mut conn = self.pool.connection().await?;
        let stmt = &self.sql.read;
        let row = conn
            .fetch_optional(&stmt.sql, stmt.bind(&Self::args(resource))?, &stmt.cols)
            .await?;
        Ok(row.map(|r| Record::of(&r)))
    }

    /// Begins the fence's transaction with the resource's row locked, creating the row first
    /// when it is missing.
    async fn lock_row(
        &self,
        args: &Args,
    ) -> std::result::Result<(Box<dyn Session>, Record), OpError> {
        let lock = &self.sql.lock;
        for _ in 0..3 {
            let mut tx = self.pool.begin().await?;
            if let Some(row) = tx
                .fetch_optional(&lock.sql, lock.bind(args)?, &lock.cols)
                .await?
            {
                return Ok((tx, Record::of(&row)));
            }
            tx.rollback().await?;
            let seed = &self.sql.seed;
            self.pool
                .connection()
                .await?
                .execute(&seed.sql, seed.bind(args)?)
                .await?;
        }
        Err(OpError::Fail(Error::unavailable(
            "the fence's row kept disappearing (deleted by hand?)",
        )))
    }

    async fn execute_once(
        &self,
        resource: &str,
        token: &FenceToken,
        statements: &[Statement],
    ) -> std::result::Result<Vec<u64>, OpError> {
        let mut args = Self::args(resource).with(P::Token, SqlValue::Int(token.token as i64));
        let (mut tx, stored) = self.lock_row(&args).await?;
        let matched = check_lock(stored.lock.as_deref(), token)?;
        // First use, or a record under an alias of the lock's identity: record the current one.
        if (stored.lock.is_none() || matched == LockMatch::Alias)
            && let Some(lock) = &token.lock
        {
            args.set(P::LockKey, SqlValue::Text(lock.key()));
            let set_lock = &self.sql.set_lock;
            tx.execute(&set_lock.sql, set_lock.bind(&args)?).await?;
        }
        let judged = self.judge(&stored, token);
        let advance = &self.sql.advance;
        if tx.execute(&advance.sql, advance.bind(&args)?).await? != 1
            && !super::fencing_disabled_for_fault_tests()
        {
            let _ = tx.rollback().await;
            super::warn_of_origin(resource, token, judged.warning);
            return Err(OpError::Fail(Error::stale_token(format!(
                "fence {resource:?} has accepted a newer token than {}",
                token.token
            ))));
        }
        if let (Some(record), Some(set_origins)) = (&judged.record, &self.sql.set_origins) {
            args.set(P::Origins, SqlValue::Text(record.clone()));
            tx.execute(&set_origins.sql, set_origins.bind(&args)?)
                .await?;
        }
        let mut affected = Vec::with_capacity(statements.len());
        for (i, statement) in statements.iter().enumerate() {
            let sql: Arc<str> = statement.sql.as_str().into();
            match tx.execute(&sql, statement.params.clone()).await {
                Ok(n) => affected.push(n),
                Err(e) => {
                    let _ = tx.rollback().await;
                    if is_conflict(&e) {
                        // Rolled back whole by the database: the write is run again.
                        return Err(OpError::Sql(e));
                    }
                    let err =
                        map_sqlx_error(&format!("statement {} of the fenced write", i + 1), e);
                    return Err(OpError::Fail(
                        Error::new(
                            err.code(),
                            format!("{}; nothing was written", err.message()),
                        )
                        .with_cause_of(&err),
                    ));
                }
            }
        }
        tx.commit().await?;
        super::warn_of_origin(resource, token, judged.warning);
        Ok(affected)
    }

    /// What the token's origin means to this fence (nothing on a table without origins).
    fn judge(&self, stored: &Record, token: &FenceToken) -> Judgement {
        let origin = self.sql.set_origins.as_ref().and(token.origin);
        Origins::parse(stored.origins.as_deref()).judge(origin, token.token, stored.highest())
    }
}

/// A fence's row: the highest token accepted (-1 before the first), the lock it guards, and
/// the origins of its tokens.
struct Record {
    token: i64,
    lock: Option<String>,
    origins: Option<String>,
}

impl Record {
    fn of(row: &Row) -> Record {
        Record {
            token: int(row, 0).unwrap_or(-1),
            lock: text(row, 1),
            origins: text(row, 2),
        }
    }

    fn highest(&self) -> Option<u64> {
        (self.token >= 0).then_some(self.token as u64)
    }
}

/// Whether the fence table has the `origins` column, adding it when fencelock may change the
/// table. Two processes may add it at once: the loser's error is ignored, and the probe after
/// it answers.
async fn has_origins_column(pool: &dyn SqlPool, sql: &FenceSql, may_add: bool) -> bool {
    let probe = || async {
        let mut conn = pool.connection().await?;
        conn.execute(
            &sql.probe_origins.sql,
            sql.probe_origins.bind(&Args::new())?,
        )
        .await
    };
    if probe().await.is_ok() {
        return true;
    }
    if may_add {
        let add = async {
            let mut conn = pool.connection().await?;
            conn.execute(&sql.add_origins.sql, sql.add_origins.bind(&Args::new())?)
                .await
        };
        let _ = add.await;
        return probe().await.is_ok();
    }
    false
}

fn check_lock(stored: Option<&str>, token: &FenceToken) -> Result<LockMatch> {
    let Some(stored) = stored else {
        return Ok(LockMatch::Same);
    };
    match token.matches_lock(stored) {
        LockMatch::Other => Err(Error::invalid(format!(
            "this fence guards another lock; a token of lock {:?} is not ordered with its tokens",
            token.lock.as_ref().map(|l| l.name.as_str()).unwrap_or("")
        ))),
        matched => Ok(matched),
    }
}

#[async_trait]
impl FenceBackend for SqlFence {
    async fn fenced_execute(
        &self,
        resource: &str,
        token: &FenceToken,
        statements: &[Statement],
    ) -> Result<Vec<u64>> {
        with_conflict_retries("fenced write", &self.table, || {
            self.execute_once(resource, token, statements)
        })
        .await
    }

    async fn check(&self, resource: &str, token: &FenceToken) -> Result<()> {
        let Some(stored) =
            with_conflict_retries("fence check", &self.table, || self.read(resource)).await?
        else {
            return Ok(());
        };
        check_lock(stored.lock.as_deref(), token)?;
        super::warn_of_origin(resource, token, self.judge(&stored, token).warning);
        if (token.token as i64) < stored.token {
            return Err(Error::stale_token(format!(
                "fence {resource:?} has accepted token {}, newer than {}",
                stored.token, token.token
            )));
        }
        Ok(())
    }

    async fn highest(&self, resource: &str) -> Result<Option<u64>> {
        let row = with_conflict_retries("fence read", &self.table, || self.read(resource)).await?;
        Ok(row.and_then(|r| r.highest()))
    }

    async fn query(&self, sql: &str, params: &[SqlValue]) -> Result<Vec<Vec<SqlValue>>> {
        let read = async {
            let mut session = self.pool.read_only().await?;
            let rows = session
                .fetch_all_values(&Arc::from(sql), params.to_vec())
                .await;
            let _ = session.rollback().await;
            rows
        };
        read.await.map_err(|e| {
            if is_read_only_refusal(&e) {
                let err = map_sqlx_error("fence query", e);
                return Error::invalid(format!(
                    "{}: a fence query only reads; write with fenced_execute",
                    err.message()
                ))
                .with_cause_of(&err);
            }
            map_sqlx_error("fence query", e)
        })
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}
