//! The lease table algorithm (docs/design.md §3.5), written once for SQLite, PostgreSQL and
//! MySQL/MariaDB; the statements it runs come from [`super::lock_sql`].
//!
//! - acquire takes the row only if `owner IS NULL OR expires_at < now` (the database's
//!   clock), sets the owner, mints `token = max(counter + 1, now in µs)`, sets the expiry;
//! - renew sets `expires_at = now + ttl` where name and owner match and the lease has not
//!   expired, so an expired lease is never revived;
//! - release sets `owner = NULL` where name and owner match; the row stays, and so does its
//!   counter (a row deleted by hand is covered by the time floor);
//! - waiting is woken by PostgreSQL's NOTIFY (one listening connection per Locker) and
//!   polls elsewhere.
//!
//! A deadlock or serialization failure rolls the whole transaction back, so those are run
//! again at once (a few times) before anything is reported ([`super::retry`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;

use super::SqlSettings;
use super::dialect::{Args, Flavor, P};
use super::in_flight::InFlight;
use super::lock_sql::{AcquireSql, LockSql};
use super::schema::read_meta;
use super::session::{SqlPool, int, text};
use crate::backend::{AcquireRequest, Attempt, Backend, LockInfo, ReleaseWatch, Renewal};
use crate::clock::unix_micros;
use crate::error::{Error, Result};
use crate::ids::OwnerId;
use crate::name::LockName;
use crate::options::LockerOptions;
use crate::sql_value::SqlValue;
use crate::url::{BackendKind, LockerUrl};

use super::flavor_of;
use super::retry::{OpError, with_conflict_retries};
use super::schema::ensure_tables;

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn duration_from_micros(us: i64) -> Duration {
    Duration::from_micros(us.max(0) as u64)
}

fn minted(token: Option<i64>) -> std::result::Result<u64, OpError> {
    match token {
        Some(t) if t > 0 => Ok(t as u64),
        other => Err(OpError::Fail(Error::backend(format!(
            "the lease table returned no usable token ({other:?}); was the row changed by hand?"
        )))),
    }
}

/// The SQL lease table on any of the three databases.
pub struct SqlBackend {
    kind: BackendKind,
    pool: Arc<dyn SqlPool>,
    sql: Arc<LockSql>,
    /// Acquire attempts running, by owner id (see [`InFlight`]).
    attempts: Arc<InFlight>,
    deployment_id: String,
    /// PostgreSQL: the Locker's one LISTEN connection, opened on first wait.
    #[cfg(feature = "postgres")]
    notifier: Option<super::postgres::Notifier>,
    /// The operation timeout: how long close waits for connections in use to come back, and
    /// how long each try of an abandoned attempt's release may take.
    operation_timeout: Duration,
    closed: AtomicBool,
}

impl SqlBackend {
    pub(crate) async fn connect(url: &LockerUrl, options: &LockerOptions) -> Result<Self> {
        let (flavor, known) = flavor_of(url)?;
        let settings = SqlSettings::from_url(url, super::DEFAULT_TABLE, known)?;
        let sql = LockSql::new(flavor, &settings.table, options.operation_timeout)?;
        let pool = super::open_pool(url, options, &settings).await?;
        let prepared = async {
            let seed = Args::new()
                .with(
                    P::Version,
                    SqlValue::Text(super::SCHEMA_VERSION.to_string()),
                )
                .with(
                    P::Deployment,
                    SqlValue::Text(OwnerId::random()?.to_uuid_string()),
                );
            ensure_tables(
                pool.as_ref(),
                &sql.schema,
                settings.create_table,
                seed.clone(),
                "lease table",
            )
            .await?;
            read_meta(pool.as_ref(), &sql, settings.create_table.then_some(&seed)).await
        };
        let deployment_id = match prepared.await {
            Ok(id) => id,
            Err(e) => {
                pool.close().await;
                return Err(e);
            }
        };
        #[cfg(feature = "postgres")]
        let notifier = match flavor {
            Flavor::Postgres => Some(super::postgres::Notifier::new(
                super::postgres::connect_options(url, options)?,
                options.operation_timeout,
                tokio::runtime::Handle::try_current()
                    .map_err(|_| Error::internal("a Locker must connect inside a tokio runtime"))?,
            )),
            _ => None,
        };
        Ok(SqlBackend {
            kind: url.kind,
            pool,
            sql: Arc::new(sql),
            attempts: Arc::default(),
            deployment_id,
            #[cfg(feature = "postgres")]
            notifier,
            operation_timeout: options.operation_timeout,
            closed: AtomicBool::new(false),
        })
    }

    fn ensure_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::closed("the locker was closed"));
        }
        Ok(())
    }

    fn context(&self, what: &str) -> String {
        format!("{} {what}", self.kind.as_str())
    }

    fn lock_args(name: &LockName, owner: OwnerId) -> Args {
        Args::new()
            .with(P::Name, SqlValue::Bytes(name.as_str().as_bytes().to_vec()))
            .with(P::Owner, SqlValue::Bytes(owner.as_bytes().to_vec()))
    }

    async fn renew_once(
        &self,
        name: &LockName,
        owner: OwnerId,
        ttl: Duration,
    ) -> std::result::Result<Renewal, OpError> {
        let mut s = if self.sql.writes_in_tx {
            self.pool.begin().await?
        } else {
            self.pool.connection().await?
        };
        let args = Self::lock_args(name, owner)
            .with(P::Ttl, SqlValue::Int(micros(ttl)))
            .with(P::Now, SqlValue::Int(unix_micros()));
        let n = s
            .execute(&self.sql.renew.sql, self.sql.renew.bind(&args)?)
            .await?;
        s.commit().await?;
        Ok(if n == 1 {
            Renewal::Renewed
        } else {
            Renewal::NotOurs
        })
    }

    async fn inspect_once(&self, name: &LockName) -> std::result::Result<LockInfo, OpError> {
        let mut conn = self.pool.connection().await?;
        let args = Args::new()
            .with(P::Name, SqlValue::Bytes(name.as_str().as_bytes().to_vec()))
            .with(P::Now, SqlValue::Int(unix_micros()));
        let stmt = &self.sql.inspect;
        let row = conn
            .fetch_optional(&stmt.sql, stmt.bind(&args)?, &stmt.cols)
            .await?;
        let Some(row) = row else {
            return Ok(LockInfo::free(name, None));
        };
        let held = int(&row, 0) == Some(1);
        Ok(LockInfo {
            name: name.to_string(),
            held,
            token: int(&row, 1).filter(|t| *t > 0).map(|t| t as u64),
            holder: if held { text(&row, 2) } else { None },
            time_left: if held {
                int(&row, 3).map(duration_from_micros)
            } else {
                None
            },
            waiters: Vec::new(),
        })
    }

    /// A range of the primary key: every name starting with `prefix` lies in
    /// `[prefix, prefix + 0xFF)`, since no byte of UTF-8 is 0xFF; no other name does.
    async fn list_once(
        &self,
        prefix: &str,
        limit: usize,
    ) -> std::result::Result<Vec<LockInfo>, OpError> {
        let mut conn = self.pool.connection().await?;
        let mut upper = prefix.as_bytes().to_vec();
        upper.push(0xFF);
        let args = Args::new()
            .with(P::Name, SqlValue::Bytes(prefix.as_bytes().to_vec()))
            .with(P::Upper, SqlValue::Bytes(upper))
            .with(P::Now, SqlValue::Int(unix_micros()));
        let stmt = &self.sql.list;
        let rows = conn
            .fetch_all(&stmt.sql, stmt.bind(&args)?, &stmt.cols)
            .await?;
        Ok(rows
            .into_iter()
            .take(limit)
            .filter_map(|row| {
                Some(LockInfo {
                    name: text(&row, 0)?,
                    held: true,
                    token: int(&row, 1).filter(|t| *t > 0).map(|t| t as u64),
                    holder: text(&row, 2),
                    time_left: int(&row, 3).map(duration_from_micros),
                    waiters: Vec::new(),
                })
            })
            .collect())
    }

    async fn force_release_once(&self, name: &LockName) -> std::result::Result<bool, OpError> {
        let mut s = if self.sql.writes_in_tx {
            self.pool.begin().await?
        } else {
            self.pool.connection().await?
        };
        let mut args = Args::new()
            .with(P::Name, SqlValue::Bytes(name.as_str().as_bytes().to_vec()))
            .with(P::Now, SqlValue::Int(unix_micros()));
        if let Some(channel) = self.sql.channel(name.as_str()) {
            args.set(P::Channel, SqlValue::Text(channel));
        }
        let n = s
            .execute(
                &self.sql.force_release.sql,
                self.sql.force_release.bind(&args)?,
            )
            .await?;
        s.commit().await?;
        Ok(n == 1)
    }
}

async fn release_once(
    pool: &dyn SqlPool,
    sql: &LockSql,
    name: &LockName,
    owner: OwnerId,
) -> std::result::Result<bool, OpError> {
    let mut s = if sql.writes_in_tx {
        pool.begin().await?
    } else {
        pool.connection().await?
    };
    let mut args = SqlBackend::lock_args(name, owner);
    if let Some(channel) = sql.channel(name.as_str()) {
        args.set(P::Channel, SqlValue::Text(channel));
    }
    let n = s
        .execute(&sql.release.sql, sql.release.bind(&args)?)
        .await?;
    s.commit().await?;
    Ok(n == 1)
}

/// The release an abandoned attempt runs once it has ended: tried again once after a failure
/// or after `timeout`, so a ghost lasts at most 2 x `timeout` while the server answers.
async fn release_abandoned(
    pool: &dyn SqlPool,
    sql: &LockSql,
    context: &str,
    name: &LockName,
    owner: OwnerId,
    timeout: Duration,
) {
    for round in 1..=2 {
        let released =
            with_conflict_retries(context, &sql.table, || release_once(pool, sql, name, owner));
        match tokio::time::timeout(timeout, released).await {
            Ok(Ok(freed)) => {
                if freed {
                    flog!(
                        debug,
                        lock = name,
                        "an acquire given up on took the lock after all; released it"
                    );
                }
                return;
            }
            Ok(Err(e)) => flog!(
                warn,
                lock = name,
                "releasing an acquire given up on (try {round} of 2): {e}"
            ),
            Err(_) => flog!(
                warn,
                lock = name,
                "releasing an acquire given up on (try {round} of 2): no answer within {timeout:?}"
            ),
        }
    }
}

async fn acquire_once(
    pool: &dyn SqlPool,
    sql: &LockSql,
    req: &AcquireRequest<'_>,
) -> std::result::Result<Attempt, OpError> {
    let mut args = SqlBackend::lock_args(req.name, req.owner)
        .with(P::Ttl, SqlValue::Int(micros(req.ttl)))
        .with(P::Holder, SqlValue::Text(req.holder.to_string()));
    match &sql.acquire {
        AcquireSql::Upsert { upsert, left } => {
            let mut s = if sql.writes_in_tx {
                pool.begin().await?
            } else {
                pool.connection().await?
            };
            // SQLite's clock, read once the write lock is held.
            args.set(P::Now, SqlValue::Int(unix_micros()));
            let row = s
                .fetch_optional(&upsert.sql, upsert.bind(&args)?, &upsert.cols)
                .await?;
            let attempt = match row.as_ref().and_then(|r| int(r, 0)) {
                Some(token) => Attempt::Acquired {
                    token: minted(Some(token))?,
                    origin: None,
                },
                None => {
                    let left_us = match left {
                        None => row.as_ref().and_then(|r| int(r, 1)),
                        Some(left) => s
                            .fetch_optional(&left.sql, left.bind(&args)?, &left.cols)
                            .await?
                            .and_then(|r| int(&r, 0)),
                    };
                    Attempt::Held {
                        expires_in: left_us.map(duration_from_micros),
                    }
                }
            };
            s.commit().await?;
            Ok(attempt)
        }
        AcquireSql::LockRow {
            seed,
            lock,
            take,
            token,
        } => {
            for _ in 0..3 {
                let mut tx = pool.begin().await?;
                let Some(row) = tx
                    .fetch_optional(&lock.sql, lock.bind(&args)?, &lock.cols)
                    .await?
                else {
                    // No row yet: insert it on its own, outside any transaction, then lock it.
                    tx.rollback().await?;
                    pool.connection()
                        .await?
                        .execute(&seed.sql, seed.bind(&args)?)
                        .await?;
                    continue;
                };
                if int(&row, 0) == Some(1) {
                    tx.rollback().await?;
                    return Ok(Attempt::Held {
                        expires_in: int(&row, 1).map(duration_from_micros),
                    });
                }
                tx.execute(&take.sql, take.bind(&args)?).await?;
                let minted_token = tx
                    .fetch_optional(&token.sql, token.bind(&args)?, &token.cols)
                    .await?;
                let minted_token = minted(minted_token.and_then(|r| int(&r, 0)))?;
                tx.commit().await?;
                return Ok(Attempt::Acquired {
                    token: minted_token,
                    origin: None,
                });
            }
            Err(OpError::Fail(Error::unavailable(format!(
                "the row of lock {:?} kept disappearing while it was taken (deleted by hand?)",
                req.name.as_str()
            ))))
        }
    }
}

#[async_trait]
impl Backend for SqlBackend {
    fn kind(&self) -> BackendKind {
        self.kind
    }

    fn deployment_id(&self) -> &str {
        &self.deployment_id
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        self.ensure_open()?;
        let (pool, sql, context) = (self.pool.clone(), self.sql.clone(), self.context("acquire"));
        let (name, owner, ttl, holder) =
            (req.name.clone(), req.owner, req.ttl, req.holder.to_string());
        let (timeout, releasing) = (self.operation_timeout, self.context("release"));
        let running = self.attempts.start(owner);
        let attempt = tokio::spawn(async move {
            let req = AcquireRequest {
                name: &name,
                owner,
                ttl,
                holder: &holder,
            };
            let result = with_conflict_retries(&context, &sql.table, || {
                acquire_once(pool.as_ref(), &sql, &req)
            })
            .await;
            // Given up on while it ran: the lock may be ours (or, after an error, may be) for
            // an owner id nobody holds a lease for. Undo it before the release waiting for
            // this attempt goes on (it may have timed out meanwhile).
            if running.settle() && !matches!(result, Ok(Attempt::Held { .. })) {
                release_abandoned(pool.as_ref(), &sql, &releasing, &name, owner, timeout).await;
            }
            drop(running);
            result
        });
        attempt
            .await
            .map_err(|e| Error::internal(format!("the acquire attempt's task failed: {e}")))?
    }

    async fn renew(&self, name: &LockName, owner: OwnerId, ttl: Duration) -> Result<Renewal> {
        self.ensure_open()?;
        with_conflict_retries(&self.context("renew"), &self.sql.table, || {
            self.renew_once(name, owner, ttl)
        })
        .await
    }

    async fn release(&self, name: &LockName, owner: OwnerId) -> Result<bool> {
        self.ensure_open()?;
        self.attempts.abandon(owner).await;
        with_conflict_retries(&self.context("release"), &self.sql.table, || {
            release_once(self.pool.as_ref(), &self.sql, name, owner)
        })
        .await
    }

    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        self.ensure_open()?;
        with_conflict_retries(&self.context("inspect"), &self.sql.table, || {
            self.inspect_once(name)
        })
        .await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>> {
        self.ensure_open()?;
        with_conflict_retries(&self.context("list"), &self.sql.table, || {
            self.list_once(prefix, limit)
        })
        .await
    }

    async fn force_release(&self, name: &LockName) -> Result<bool> {
        self.ensure_open()?;
        with_conflict_retries(&self.context("force release"), &self.sql.table, || {
            self.force_release_once(name)
        })
        .await
    }

    async fn watch(&self, name: &LockName) -> Result<Box<dyn ReleaseWatch>> {
        self.ensure_open()?;
        #[cfg(feature = "postgres")]
        if let (Some(notifier), Some(channel)) = (&self.notifier, self.sql.channel(name.as_str())) {
            return Ok(notifier.watch(channel).await);
        }
        Ok(Box::new(crate::backend::PollOnly))
    }

    async fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        #[cfg(feature = "postgres")]
        if let Some(notifier) = &self.notifier {
            notifier.close();
        }
        // sqlx's close waits, without a limit, for every connection in use to come back, and a
        // connection comes back only once a ping answers on it (after a cancelled query, say):
        // close never hangs on one. A connection still out is closed when it comes back.
        if tokio::time::timeout(self.operation_timeout, self.pool.close())
            .await
            .is_err()
        {
            flog!(
                warn,
                "closing: a database connection still in use after {:?}; not waiting for it",
                self.operation_timeout
            );
        }
    }
}
