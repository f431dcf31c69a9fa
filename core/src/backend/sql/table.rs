//! The lease table algorithm (docs/design.md §3.5), written once for SQLite, PostgreSQL and
//! MySQL/MariaDB; the statements it runs come from [`super::mutex_sql`].
//!
//! - acquire takes the row only if `owner IS NULL OR expires_at < now` (the database's
//!   clock), sets the owner, mints `token = max(counter + 1, now in µs)`, sets the expiry;
//! - renew sets `expires_at = now + ttl` where name and owner match and the lease has not
//!   expired, so an expired lease is never revived;
//! - release sets `owner = NULL` where name and owner match; the row stays, and so does its
//!   counter (a row deleted by hand is covered by the time floor);
//! - waiting is woken by PostgreSQL's NOTIFY (one listening connection per Locker), and
//!   elsewhere by a watcher that reads the waited rows when the database's files change
//!   (SQLite) or every few milliseconds (MySQL/MariaDB) ([`super::wake`]).
//!
//! That is the mutex; semaphores and read-write locks are in [`super::semaphore_rwlock`], on the same
//! rows, and this file sends each operation to one or the other by its mode. Inspect, list
//! and force release, which see every kind, are in [`super::admin`].
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
use super::mutex_sql::{AcquireSql, LockSql};
use super::schema::read_meta;
use super::semaphore_rwlock;
use super::semaphore_rwlock_schema::{SharedSchema, prepare};
use super::semaphore_rwlock_sql::{SHARED_OWNER, SharedSql};
use super::session::{SqlPool, int, text};
use crate::backend::{
    AcquireRequest, Attempt, Backend, LockInfo, ReleaseWatch, RenewRequest, Renewal,
    renew_in_batches,
};
use crate::clock::unix_micros;
use crate::error::{Error, Result};
use crate::ids::OwnerId;
use crate::mode::{LockKind, LockMode, kind_conflict};
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

pub(super) fn duration_from_micros(us: i64) -> Duration {
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

/// What every operation runs on: the statement pool and the statements of every kind.
pub(super) struct Store {
    pub pool: Arc<dyn SqlPool>,
    pub sql: LockSql,
    pub shared: SharedSql,
    pub semaphore_rwlock_schema: SharedSchema,
}

impl Store {
    /// The statements of semaphores and read-write locks, if this table can hold them.
    pub fn shared(&self) -> Result<&SharedSql> {
        self.semaphore_rwlock_schema.check()?;
        Ok(&self.shared)
    }
}

/// The SQL lease table on any of the three databases.
pub struct SqlBackend {
    kind: BackendKind,
    pub(super) store: Arc<Store>,
    /// Acquire attempts running, by owner id (see [`InFlight`]).
    attempts: Arc<InFlight>,
    deployment_id: String,
    /// PostgreSQL: the Locker's one LISTEN connection, opened on first wait.
    #[cfg(feature = "postgres")]
    notifier: Option<super::postgres::Notifier>,
    /// SQLite and MySQL/MariaDB: the Locker's wake-up watcher, started on first wait.
    waker: Option<super::wake::Waker>,
    /// The operation timeout: how long close waits for connections in use to come back, and
    /// how long each try of an abandoned attempt's release may take.
    operation_timeout: Duration,
    closed: AtomicBool,
}

impl SqlBackend {
    pub(crate) async fn connect(url: &LockerUrl, options: &LockerOptions) -> Result<Self> {
        let (flavor, known) = flavor_of(url)?;
        let mut settings = SqlSettings::from_url(url, super::DEFAULT_TABLE, known)?;
        settings.read_committed = true;
        let timeout = options.operation_timeout;
        let sql = LockSql::new(flavor, &settings.table, timeout, true)?;
        let shared = SharedSql::new(flavor, &settings.table, timeout)?;
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
            let deployment_id =
                read_meta(pool.as_ref(), &sql, settings.create_table.then_some(&seed)).await?;
            let semaphore_rwlock_schema = prepare(
                pool.as_ref(),
                &shared,
                &settings.table,
                settings.create_table,
            )
            .await?;
            Ok::<_, Error>((deployment_id, semaphore_rwlock_schema))
        };
        let (deployment_id, semaphore_rwlock_schema) = match prepared.await {
            Ok(prepared) => prepared,
            Err(e) => {
                pool.close().await;
                return Err(e);
            }
        };
        let sql = if semaphore_rwlock_schema.columns {
            sql
        } else {
            LockSql::new(flavor, &settings.table, timeout, false)?
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
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::internal("a Locker must connect inside a tokio runtime"))?;
        let waker = match flavor {
            Flavor::Postgres => None,
            Flavor::MySql => Some(super::wake::Trigger::Poll),
            #[cfg(feature = "sqlite")]
            Flavor::Sqlite => Some(super::sqlite::wake_trigger(url)?),
            #[cfg(not(feature = "sqlite"))]
            Flavor::Sqlite => None,
        }
        .map(|trigger| {
            let state = sql.watch_state(semaphore_rwlock_schema.unavailable.is_none())?;
            Ok::<_, Error>(super::wake::Waker::new(
                pool.clone(),
                state,
                trigger,
                runtime.clone(),
            ))
        })
        .transpose()?;
        Ok(SqlBackend {
            kind: url.kind,
            store: Arc::new(Store {
                pool,
                sql,
                shared,
                semaphore_rwlock_schema,
            }),
            waker,
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

    pub(super) fn context(&self, what: &str) -> String {
        format!("{} {what}", self.kind.as_str())
    }

    pub(super) fn lock_args(name: &LockName, owner: OwnerId) -> Args {
        Args::new()
            .with(P::Name, SqlValue::Bytes(name.as_str().as_bytes().to_vec()))
            .with(P::Owner, SqlValue::Bytes(owner.as_bytes().to_vec()))
            .with(P::Shared, SqlValue::Bytes(SHARED_OWNER.to_vec()))
    }

    async fn renew_once(
        &self,
        name: &LockName,
        mode: LockMode,
        owner: OwnerId,
        ttl: Duration,
    ) -> std::result::Result<Renewal, OpError> {
        let store = self.store.as_ref();
        if mode != LockMode::Exclusive {
            return semaphore_rwlock::renew(
                store.pool.as_ref(),
                store.shared()?,
                name,
                mode,
                owner,
                ttl,
            )
            .await;
        }
        let mut s = if store.sql.writes_in_tx {
            store.pool.begin().await?
        } else {
            store.pool.connection().await?
        };
        let args = Self::lock_args(name, owner)
            .with(P::Ttl, SqlValue::Int(micros(ttl)))
            .with(P::Now, SqlValue::Int(unix_micros()));
        let n = s
            .execute(&store.sql.renew.sql, store.sql.renew.bind(&args)?)
            .await?;
        s.commit().await?;
        Ok(if n == 1 {
            Renewal::Renewed
        } else {
            Renewal::NotOurs
        })
    }
}

/// Releases `owner`'s lease of `name` in `mode`: the mutex's row, or a shared lease (or, for
/// an owner that holds none, its registration as a waiter).
async fn release_once(
    store: &Store,
    name: &LockName,
    mode: LockMode,
    owner: OwnerId,
) -> std::result::Result<bool, OpError> {
    let (pool, sql) = (store.pool.as_ref(), &store.sql);
    let channel = sql.channel(name.as_str());
    if mode != LockMode::Exclusive {
        return semaphore_rwlock::release(pool, store.shared()?, name, mode, owner, channel).await;
    }
    let mut s = if sql.writes_in_tx {
        pool.begin().await?
    } else {
        pool.connection().await?
    };
    let mut args = SqlBackend::lock_args(name, owner);
    if let Some(channel) = channel {
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
    store: &Store,
    context: &str,
    name: &LockName,
    mode: LockMode,
    owner: OwnerId,
    timeout: Duration,
) {
    for round in 1..=2 {
        let released = with_conflict_retries(context, &store.sql.table, || {
            release_once(store, name, mode, owner)
        });
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

/// The kind a name the mutex could not take is in use as, when it is not a mutex: read from
/// the column the mutex's acquire statements add for it.
fn in_use_as(name: &LockName, spelling: Option<String>) -> std::result::Result<(), OpError> {
    match spelling.as_deref().and_then(LockKind::parse) {
        Some(found) if found != LockKind::Mutex => Err(OpError::Fail(kind_conflict(
            name.as_str(),
            LockKind::Mutex,
            found,
        ))),
        _ => Ok(()),
    }
}

async fn acquire_once(
    store: &Store,
    req: &AcquireRequest<'_>,
) -> std::result::Result<Attempt, OpError> {
    let (pool, sql) = (store.pool.as_ref(), &store.sql);
    if req.mode != LockMode::Exclusive {
        return semaphore_rwlock::acquire(pool, store.shared()?, req).await;
    }
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
                Some(token) => Ok(Attempt::Acquired {
                    token: minted(Some(token))?,
                    origin: None,
                }),
                None => {
                    let (left_us, found) = match left {
                        None => (
                            row.as_ref().and_then(|r| int(r, 1)),
                            row.as_ref().and_then(|r| text(r, 2)),
                        ),
                        Some(left) => {
                            let row = s
                                .fetch_optional(&left.sql, left.bind(&args)?, &left.cols)
                                .await?;
                            (
                                row.as_ref().and_then(|r| int(r, 0)),
                                row.as_ref().and_then(|r| text(r, 1)),
                            )
                        }
                    };
                    in_use_as(req.name, found).map(|()| Attempt::Held {
                        expires_in: left_us.map(duration_from_micros),
                    })
                }
            };
            s.commit().await?;
            attempt
        }
        AcquireSql::LockRow {
            take_free,
            seed,
            lock,
            take,
            token,
        } => {
            let (taken, minted_id) = pool
                .connection()
                .await?
                .execute_with_id(&take_free.sql, take_free.bind(&args)?)
                .await?;
            if taken == 1 {
                return Ok(Attempt::Acquired {
                    token: minted(minted_id.and_then(|id| i64::try_from(id).ok()))?,
                    origin: None,
                });
            }
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
                    in_use_as(req.name, text(&row, 2))?;
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

    /// Every kind: on a table that cannot hold semaphores and read-write locks (made before
    /// them, and not to be changed by fencelock), their operations fail saying why.
    fn offers(&self, _kind: LockKind) -> bool {
        true
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        self.ensure_open()?;
        let (store, context) = (self.store.clone(), self.context("acquire"));
        let owned = req.to_owned();
        let (timeout, releasing) = (self.operation_timeout, self.context("release"));
        let running = self.attempts.start(req.owner);
        crate::sync::finish_even_if_dropped(async move {
            let req = owned.as_request();
            let result =
                with_conflict_retries(&context, &store.sql.table, || acquire_once(&store, &req))
                    .await;
            // Given up on while it ran: the lock may be ours (or, after an error, may be) for
            // an owner id nobody holds a lease for. Undo it before the release waiting for
            // this attempt goes on (it may have timed out meanwhile).
            if running.settle() && !matches!(result, Ok(Attempt::Held { .. })) {
                release_abandoned(&store, &releasing, req.name, req.mode, req.owner, timeout).await;
            }
            drop(running);
            result
        })
        .await?
    }

    async fn renew(
        &self,
        name: &LockName,
        mode: LockMode,
        owner: OwnerId,
        ttl: Duration,
    ) -> Result<Renewal> {
        self.ensure_open()?;
        with_conflict_retries(&self.context("renew"), &self.store.sql.table, || {
            self.renew_once(name, mode, owner, ttl)
        })
        .await
    }

    /// The mutexes among `leases` renew in one statement per ttl ([`super::renew_batch`]);
    /// semaphores and read-write locks one by one.
    async fn renew_many(
        &self,
        leases: &[RenewRequest<'_>],
        timeout: Duration,
    ) -> Vec<Result<Renewal>> {
        renew_in_batches(
            self,
            leases,
            timeout,
            |lease| (lease.mode == LockMode::Exclusive).then_some(lease.ttl),
            |ttl, batch| async move {
                let renewed = async {
                    self.ensure_open()?;
                    with_conflict_retries(&self.context("renew"), &self.store.sql.table, || {
                        let store = self.store.as_ref();
                        super::renew_batch::renew_mutexes(
                            store.pool.as_ref(),
                            &store.sql,
                            &batch,
                            ttl,
                        )
                    })
                    .await
                }
                .await;
                match renewed {
                    Ok(answers) => answers.into_iter().map(Ok).collect(),
                    Err(e) => batch.iter().map(|_| Err(e.clone())).collect(),
                }
            },
        )
        .await
    }

    async fn release(&self, name: &LockName, mode: LockMode, owner: OwnerId) -> Result<bool> {
        self.ensure_open()?;
        self.attempts.abandon(owner).await;
        with_conflict_retries(&self.context("release"), &self.store.sql.table, || {
            release_once(&self.store, name, mode, owner)
        })
        .await
    }

    async fn inspect(&self, name: &LockName) -> Result<LockInfo> {
        self.ensure_open()?;
        with_conflict_retries(&self.context("inspect"), &self.store.sql.table, || {
            self.inspect_once(name)
        })
        .await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>> {
        self.ensure_open()?;
        with_conflict_retries(&self.context("list"), &self.store.sql.table, || {
            self.list_once(prefix, limit)
        })
        .await
    }

    async fn force_release(&self, name: &LockName) -> Result<bool> {
        self.ensure_open()?;
        with_conflict_retries(
            &self.context("force release"),
            &self.store.sql.table,
            || self.force_release_once(name),
        )
        .await
    }

    async fn watch(&self, name: &LockName) -> Result<Box<dyn ReleaseWatch>> {
        self.ensure_open()?;
        #[cfg(feature = "postgres")]
        if let (Some(notifier), Some(channel)) =
            (&self.notifier, self.store.sql.channel(name.as_str()))
        {
            return Ok(notifier.watch(channel).await);
        }
        if let Some(waker) = &self.waker {
            return Ok(waker.watch(name));
        }
        Ok(Box::new(crate::backend::PollOnly))
    }

    /// A semaphore's or read-write lock's waiter gives up: its registration goes (an attempt
    /// still running under `owner` ends first, and undoes what it took). The mutex registers
    /// nothing.
    async fn abandon(&self, name: &LockName, mode: LockMode, owner: OwnerId) -> Result<()> {
        if mode == LockMode::Exclusive {
            return Ok(());
        }
        self.ensure_open()?;
        self.attempts.abandon(owner).await;
        let store = self.store.as_ref();
        let channel = store.sql.channel(name.as_str());
        with_conflict_retries(&self.context("abandon"), &store.sql.table, || async {
            let shared = store.shared()?;
            semaphore_rwlock::abandon(
                store.pool.as_ref(),
                shared,
                name,
                mode,
                owner,
                channel.clone(),
            )
            .await
        })
        .await
    }

    async fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        #[cfg(feature = "postgres")]
        if let Some(notifier) = &self.notifier {
            notifier.close();
        }
        if let Some(waker) = &self.waker {
            waker.close();
        }
        // sqlx's close waits, without a limit, for every connection in use to come back, and a
        // connection comes back only once a ping answers on it (after a cancelled query, say):
        // close never hangs on one. A connection still out is closed when it comes back.
        if tokio::time::timeout(self.operation_timeout, self.store.pool.close())
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
