//! Semaphores and read-write locks on the SQL lease table (issue 28), written once for SQLite,
//! PostgreSQL and MySQL/MariaDB; the statements come from [`super::semaphore_rwlock_sql`].
//!
//! **Layout.** A second table, `<table>_leases`, one row per (name, owner): `mode` (`permit`,
//! `read`, `write`), `permits` (a semaphore's N), `waiting` (0: a lease; 1: a registered
//! waiter), `token` (a lease's), `expires_at`, `holder`, `layout` (this row's layout version).
//! The name's row of the lease table stays the one place a name's state is serialized on, and
//! carries three more things while the name is a semaphore or read-write lock in use:
//! `owner` = the mark `shared` (never a 16-byte owner id), `expires_at` = the latest expiry
//! among its leases and waiters, and the `kind` and `permits` columns (added to tables made
//! before them). So:
//! - the mutex's acquire, unchanged where it takes the row (`owner IS NULL OR expires_at <
//!   now`), never takes a name in use as another kind, and only reads `kind` to say so
//!   (INVALID_ARGUMENT instead of `Held`); earlier fencelocks see such a name as held;
//! - every token of a name comes from the row's one counter, `max(counter + 1, now in µs)`,
//!   whatever the mode, so they strictly increase across modes.
//!
//! **Transactions.** Every operation that writes `<table>_leases` runs in one transaction that
//! first locks the name's row (`SELECT … FOR UPDATE`; SQLite's `BEGIN IMMEDIATE`), so the
//! leases of a name change one transaction at a time and each statement sees the previous
//! ones' effects; every such transaction ends by setting the name's row from its leases
//! (`refresh`), so the row never claims less than its leases hold. MySQL/MariaDB runs the lease
//! table's sessions in READ COMMITTED, so none of this takes gap locks across names.
//!
//! - acquire: lock the row (a missing row is inserted first, in autocommit, as the mutex does);
//!   refuse when a mutex holds it; count the name's live leases and waiters; refuse another
//!   kind, or another N while anyone holds or waits; delete expired rows; then either mint a
//!   token and write the lease, or register (or refresh) the waiter, answering `Held`. A
//!   reader is `Held` while a writer holds or waits; a writer while anyone holds.
//! - renew: extends the owner's live lease, only while the name's row is still marked as
//!   shared (an operator's release by an earlier fencelock clears the mark).
//! - release: deletes the owner's lease, or, when it holds none, its registration (an acquire
//!   whose answer was lost is released by owner id, and may have left either); NOTIFY on
//!   PostgreSQL, on the mutex's channel of the name.
//!
//! An acquire whose answer is lost is safe: it is one transaction, and the release by owner id
//! that follows deletes whatever it left.

use std::time::Duration;

use super::dialect::{Args, P};
use super::retry::OpError;
use super::semaphore_rwlock_sql::{LEASE_LAYOUT, SHARED_OWNER, SharedSql};
use super::session::{Row, Session, SqlPool, int};
use crate::backend::{AcquireRequest, Attempt, Renewal};
use crate::clock::unix_micros;
use crate::error::{Error, Result};
use crate::ids::OwnerId;
use crate::mode::{LockKind, LockMode, kind_conflict, permits_conflict};
use crate::name::LockName;
use crate::sql_value::SqlValue;

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

pub(super) fn left(us: Option<i64>) -> Option<Duration> {
    us.map(|us| Duration::from_micros(us.max(0) as u64))
}

/// The arguments every statement of one name may use.
pub(super) fn name_args(name: &LockName) -> Args {
    Args::new()
        .with(P::Name, SqlValue::Bytes(name.as_str().as_bytes().to_vec()))
        .with(P::Shared, SqlValue::Bytes(SHARED_OWNER.to_vec()))
        .with(P::Now, SqlValue::Int(unix_micros()))
}

/// The arguments of one owner's operation in `mode`.
pub(super) fn lease_args(name: &LockName, mode: LockMode, owner: OwnerId) -> Args {
    let permits = match mode {
        LockMode::Permit { permits } => SqlValue::Int(permits.into()),
        _ => SqlValue::Null,
    };
    name_args(name)
        .with(P::Owner, SqlValue::Bytes(owner.as_bytes().to_vec()))
        .with(P::Mode, SqlValue::Text(mode.as_str().to_string()))
        .with(P::Kind, SqlValue::Text(mode.kind().as_str().to_string()))
        .with(P::Permits, permits)
}

/// Begins a write transaction, reading SQLite's clock once its write lock is held.
async fn begin(
    pool: &dyn SqlPool,
    args: &mut Args,
) -> std::result::Result<Box<dyn Session>, OpError> {
    let tx = pool.begin().await?;
    args.set(P::Now, SqlValue::Int(unix_micros()));
    Ok(tx)
}

/// Locks the name's row: `Some((held by a mutex, marked as shared))`, `None` when it is missing.
async fn lock_row(
    tx: &mut dyn Session,
    sql: &SharedSql,
    args: &Args,
) -> std::result::Result<Option<(bool, bool)>, OpError> {
    let lock = &sql.lock;
    let row = tx
        .fetch_optional(&lock.sql, lock.bind(args)?, &lock.cols)
        .await?;
    Ok(row.map(|r| (int(&r, 0) == Some(1), int(&r, 1) == Some(1))))
}

/// What the name's rows of `<table>_leases` say, for one owner ([`SharedSql::tally`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Tally {
    /// Live leases and registrations.
    live: i64,
    holders: i64,
    writers: i64,
    /// Writers registered as waiting, other than the owner.
    writers_waiting: i64,
    permit_rows: i64,
    read_write_rows: i64,
    min_permits: Option<i64>,
    max_permits: Option<i64>,
    /// µs until the first lease ends.
    first_left_us: Option<i64>,
    /// The owner's row: 2 a lease, 1 a registration.
    mine: Option<i64>,
    my_token: Option<i64>,
    expired: i64,
    layout: Option<i64>,
}

impl Tally {
    fn of(row: &Row) -> Tally {
        let n = |i| int(row, i).unwrap_or(0);
        Tally {
            live: n(0),
            holders: n(1),
            writers: n(2),
            writers_waiting: n(3),
            permit_rows: n(4),
            read_write_rows: n(5),
            min_permits: int(row, 6),
            max_permits: int(row, 7),
            first_left_us: int(row, 8),
            mine: int(row, 9),
            my_token: int(row, 10),
            expired: n(11),
            layout: int(row, 12),
        }
    }
}

/// What an acquire does, given the tally.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// The owner holds a lease already (an attempt run twice): its token.
    Mine(Option<i64>),
    Grant,
    Wait,
}

fn judge(name: &str, mode: LockMode, tally: &Tally) -> Result<Verdict> {
    if tally.layout.is_some_and(|v| v > LEASE_LAYOUT) {
        return Err(Error::backend(format!(
            "the shared leases of lock {name:?} have layout version {}, made by a newer \
             fencelock; this one reads version {LEASE_LAYOUT}: upgrade fencelock",
            tally.layout.unwrap_or_default()
        )));
    }
    if tally.mine == Some(2) {
        return Ok(Verdict::Mine(tally.my_token));
    }
    let wanted = mode.kind();
    let found = if tally.permit_rows > 0 {
        Some(LockKind::Semaphore)
    } else if tally.read_write_rows > 0 {
        Some(LockKind::ReadWrite)
    } else {
        None
    };
    if let Some(found) = found.filter(|found| *found != wanted) {
        return Err(kind_conflict(name, wanted, found));
    }
    let free = match mode {
        LockMode::Permit { permits } => {
            let wanted_n = i64::from(permits);
            let other = [tally.min_permits, tally.max_permits]
                .into_iter()
                .flatten()
                .find(|stored| *stored != wanted_n);
            if let Some(stored) = other {
                let stored = u32::try_from(stored).unwrap_or(u32::MAX);
                return Err(permits_conflict(name, permits, stored));
            }
            tally.holders < wanted_n
        }
        LockMode::Read => tally.writers == 0 && tally.writers_waiting == 0,
        LockMode::Write => tally.holders == 0,
        LockMode::Exclusive => {
            return Err(Error::internal(
                "a mutex was sent to the shared lease table",
            ));
        }
    };
    Ok(if free { Verdict::Grant } else { Verdict::Wait })
}

fn minted(token: Option<i64>) -> std::result::Result<u64, OpError> {
    match token {
        Some(t) if t > 0 => Ok(t as u64),
        other => Err(OpError::Fail(Error::backend(format!(
            "the lease table returned no usable token ({other:?}); was a row changed by hand?"
        )))),
    }
}

pub(super) async fn acquire(
    pool: &dyn SqlPool,
    sql: &SharedSql,
    req: &AcquireRequest<'_>,
) -> std::result::Result<Attempt, OpError> {
    let name = req.name.as_str();
    let mut args = lease_args(req.name, req.mode, req.owner)
        .with(P::Ttl, SqlValue::Int(micros(req.ttl)))
        .with(P::Holder, SqlValue::Text(req.holder.to_string()));
    for _ in 0..3 {
        let mut tx = begin(pool, &mut args).await?;
        let Some((mutex_held, _)) = lock_row(tx.as_mut(), sql, &args).await? else {
            tx.rollback().await?;
            pool.connection()
                .await?
                .execute(&sql.seed.sql, sql.seed.bind(&args)?)
                .await?;
            continue;
        };
        if mutex_held {
            tx.rollback().await?;
            return Err(kind_conflict(name, req.mode.kind(), LockKind::Mutex).into());
        }
        let tally = tx
            .fetch_optional(&sql.tally.sql, sql.tally.bind(&args)?, &sql.tally.cols)
            .await?
            .map(|row| Tally::of(&row))
            .unwrap_or_default();
        let verdict = match judge(name, req.mode, &tally) {
            Ok(verdict) => verdict,
            Err(e) => {
                tx.rollback().await?;
                return Err(e.into());
            }
        };
        if tally.expired > 0 {
            tx.execute(&sql.purge.sql, sql.purge.bind(&args)?).await?;
        }
        let waiting = tally.mine == Some(1);
        let attempt = match verdict {
            Verdict::Mine(token) => Attempt::Acquired {
                token: minted(token)?,
                origin: None,
            },
            Verdict::Grant => {
                let token = mint(tx.as_mut(), sql, &args).await?;
                args.set(P::Token, SqlValue::Int(token as i64));
                let grant = if waiting {
                    &sql.grant_update
                } else {
                    &sql.grant_insert
                };
                tx.execute(&grant.sql, grant.bind(&args)?).await?;
                tx.execute(&sql.refresh.sql, sql.refresh.bind(&args)?)
                    .await?;
                Attempt::Acquired {
                    token,
                    origin: None,
                }
            }
            Verdict::Wait => {
                let register = if waiting {
                    &sql.register_update
                } else {
                    &sql.register_insert
                };
                tx.execute(&register.sql, register.bind(&args)?).await?;
                tx.execute(&sql.refresh.sql, sql.refresh.bind(&args)?)
                    .await?;
                Attempt::Held {
                    expires_in: left(tally.first_left_us),
                }
            }
        };
        tx.commit().await?;
        return Ok(attempt);
    }
    Err(OpError::Fail(Error::unavailable(format!(
        "the row of lock {name:?} kept disappearing while it was taken (deleted by hand?)"
    ))))
}

/// Marks the name's row as shared, stores kind and N, and mints the next token.
async fn mint(
    tx: &mut dyn Session,
    sql: &SharedSql,
    args: &Args,
) -> std::result::Result<u64, OpError> {
    let row = match &sql.read_token {
        None => {
            tx.fetch_optional(&sql.mint.sql, sql.mint.bind(args)?, &sql.mint.cols)
                .await?
        }
        Some(read) => {
            tx.execute(&sql.mint.sql, sql.mint.bind(args)?).await?;
            tx.fetch_optional(&read.sql, read.bind(args)?, &read.cols)
                .await?
        }
    };
    minted(row.and_then(|r| int(&r, 0)))
}

pub(super) async fn renew(
    pool: &dyn SqlPool,
    sql: &SharedSql,
    name: &LockName,
    mode: LockMode,
    owner: OwnerId,
    ttl: Duration,
) -> std::result::Result<Renewal, OpError> {
    let mut args = lease_args(name, mode, owner).with(P::Ttl, SqlValue::Int(micros(ttl)));
    let mut tx = begin(pool, &mut args).await?;
    // A row no longer marked as shared was freed by an operator (an earlier fencelock's
    // force release clears only the mark) or taken by a mutex after every lease had expired.
    let marked = matches!(lock_row(tx.as_mut(), sql, &args).await?, Some((_, true)));
    if !marked || tx.execute(&sql.renew.sql, sql.renew.bind(&args)?).await? != 1 {
        tx.rollback().await?;
        return Ok(Renewal::NotOurs);
    }
    tx.execute(&sql.refresh.sql, sql.refresh.bind(&args)?)
        .await?;
    tx.commit().await?;
    Ok(Renewal::Renewed)
}

/// Deletes the owner's lease, or else its registration; whether it held a lease.
pub(super) async fn release(
    pool: &dyn SqlPool,
    sql: &SharedSql,
    name: &LockName,
    mode: LockMode,
    owner: OwnerId,
    channel: Option<String>,
) -> std::result::Result<bool, OpError> {
    let mut args = with_channel(lease_args(name, mode, owner), channel);
    let mut tx = begin(pool, &mut args).await?;
    // Locked even when missing: its leases, if any, are deleted all the same.
    lock_row(tx.as_mut(), sql, &args).await?;
    let released = tx
        .execute(&sql.release.sql, sql.release.bind(&args)?)
        .await?
        == 1;
    let unregistered = !released
        && tx
            .execute(&sql.unregister.sql, sql.unregister.bind(&args)?)
            .await?
            > 0;
    if released || unregistered {
        tx.execute(&sql.refresh_notify.sql, sql.refresh_notify.bind(&args)?)
            .await?;
    }
    tx.commit().await?;
    Ok(released)
}

/// Deletes the owner's registration as a waiter; a writer's, once gone, lets readers in, so
/// the name's waiters are woken.
pub(super) async fn abandon(
    pool: &dyn SqlPool,
    sql: &SharedSql,
    name: &LockName,
    mode: LockMode,
    owner: OwnerId,
    channel: Option<String>,
) -> std::result::Result<(), OpError> {
    let mut args = with_channel(lease_args(name, mode, owner), channel);
    let mut tx = begin(pool, &mut args).await?;
    lock_row(tx.as_mut(), sql, &args).await?;
    if tx
        .execute(&sql.unregister.sql, sql.unregister.bind(&args)?)
        .await?
        > 0
    {
        tx.execute(&sql.refresh_notify.sql, sql.refresh_notify.bind(&args)?)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// An operator's release of every lease of the name; whether there was one. Registered
/// waiters stay: they are not holders, and each lapses after its ttl.
pub(super) async fn force_release(
    pool: &dyn SqlPool,
    sql: &SharedSql,
    name: &LockName,
    channel: Option<String>,
) -> std::result::Result<bool, OpError> {
    let mut args = with_channel(name_args(name), channel);
    let mut tx = begin(pool, &mut args).await?;
    lock_row(tx.as_mut(), sql, &args).await?;
    let freed = tx
        .execute(&sql.force_free.sql, sql.force_free.bind(&args)?)
        .await?;
    let purged = tx.execute(&sql.purge.sql, sql.purge.bind(&args)?).await?;
    if freed + purged > 0 {
        tx.execute(&sql.refresh_notify.sql, sql.refresh_notify.bind(&args)?)
            .await?;
    }
    tx.commit().await?;
    Ok(freed > 0)
}

fn with_channel(mut args: Args, channel: Option<String>) -> Args {
    if let Some(channel) = channel {
        args.set(P::Channel, SqlValue::Text(channel));
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn tally(f: impl FnOnce(&mut Tally)) -> Tally {
        let mut t = Tally::default();
        f(&mut t);
        t
    }

    #[test]
    fn a_semaphore_grants_below_n_and_refuses_another_n() {
        let three = LockMode::Permit { permits: 3 };
        assert_eq!(
            judge("s", three, &Tally::default()).unwrap(),
            Verdict::Grant
        );
        let two_held = tally(|t| {
            (t.live, t.holders, t.permit_rows) = (2, 2, 2);
            (t.min_permits, t.max_permits) = (Some(3), Some(3));
        });
        assert_eq!(judge("s", three, &two_held).unwrap(), Verdict::Grant);
        let full = tally(|t| {
            (t.live, t.holders, t.permit_rows) = (3, 3, 3);
            (t.min_permits, t.max_permits) = (Some(3), Some(3));
        });
        assert_eq!(judge("s", three, &full).unwrap(), Verdict::Wait);
        let err = judge("s", LockMode::Permit { permits: 4 }, &full).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        assert!(err.message().contains('3'), "{err}");
    }

    #[test]
    fn readers_queue_behind_a_waiting_writer_and_writers_behind_anyone() {
        let readers = tally(|t| (t.live, t.holders, t.read_write_rows) = (2, 2, 2));
        assert_eq!(
            judge("rw", LockMode::Read, &readers).unwrap(),
            Verdict::Grant
        );
        assert_eq!(
            judge("rw", LockMode::Write, &readers).unwrap(),
            Verdict::Wait
        );
        let writer_waits = tally(|t| {
            (t.live, t.holders, t.read_write_rows, t.writers_waiting) = (3, 2, 3, 1);
        });
        assert_eq!(
            judge("rw", LockMode::Read, &writer_waits).unwrap(),
            Verdict::Wait
        );
        let writer = tally(|t| (t.live, t.holders, t.writers, t.read_write_rows) = (1, 1, 1, 1));
        assert_eq!(judge("rw", LockMode::Read, &writer).unwrap(), Verdict::Wait);
        let only_my_registration = tally(|t| {
            (t.live, t.read_write_rows, t.mine) = (1, 1, Some(1));
        });
        assert_eq!(
            judge("rw", LockMode::Write, &only_my_registration).unwrap(),
            Verdict::Grant
        );
    }

    #[test]
    fn one_name_is_one_kind_and_newer_rows_are_refused() {
        let semaphore = tally(|t| (t.live, t.holders, t.permit_rows) = (1, 1, 1));
        let err = judge("x", LockMode::Read, &semaphore).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        assert!(err.message().contains("semaphore"), "{err}");
        let rw = tally(|t| (t.live, t.read_write_rows) = (1, 1));
        let err = judge("x", LockMode::Permit { permits: 2 }, &rw).unwrap_err();
        assert!(err.message().contains("read-write lock"), "{err}");
        let newer = tally(|t| t.layout = Some(LEASE_LAYOUT + 1));
        assert_eq!(
            judge("x", LockMode::Read, &newer).unwrap_err().code(),
            ErrorCode::Backend
        );
    }

    #[test]
    fn an_attempt_run_again_finds_its_lease() {
        let mine = tally(|t| {
            (t.live, t.holders, t.read_write_rows, t.writers) = (1, 1, 1, 1);
            (t.mine, t.my_token) = (Some(2), Some(42));
        });
        assert_eq!(
            judge("rw", LockMode::Write, &mine).unwrap(),
            Verdict::Mine(Some(42))
        );
    }

    /// Each operation binds every parameter of every statement it runs, on every database.
    #[test]
    fn every_operation_binds_every_parameter_of_its_statements() {
        use super::super::dialect::Flavor;
        let name = LockName::new("n").unwrap();
        let owner = OwnerId::random().unwrap();
        let channel = || Some("fencelock_0".to_string());
        for flavor in [Flavor::Sqlite, Flavor::Postgres, Flavor::MySql] {
            let sql = SharedSql::new(flavor, "t", Duration::from_secs(10)).unwrap();
            for mode in [
                LockMode::Permit { permits: 2 },
                LockMode::Read,
                LockMode::Write,
            ] {
                let acquire = lease_args(&name, mode, owner)
                    .with(P::Ttl, SqlValue::Int(1))
                    .with(P::Holder, SqlValue::Text("h".into()))
                    .with(P::Token, SqlValue::Int(1));
                let renew = lease_args(&name, mode, owner).with(P::Ttl, SqlValue::Int(1));
                let release = with_channel(lease_args(&name, mode, owner), channel());
                let force = with_channel(name_args(&name), channel());
                let list = name_args(&name).with(P::Upper, SqlValue::Bytes(vec![0xFF]));
                let mut runs = vec![
                    (&acquire, &sql.seed),
                    (&acquire, &sql.lock),
                    (&acquire, &sql.tally),
                    (&acquire, &sql.purge),
                    (&acquire, &sql.mint),
                    (&acquire, &sql.grant_insert),
                    (&acquire, &sql.grant_update),
                    (&acquire, &sql.register_insert),
                    (&acquire, &sql.register_update),
                    (&acquire, &sql.refresh),
                    (&renew, &sql.lock),
                    (&renew, &sql.renew),
                    (&renew, &sql.refresh),
                    (&release, &sql.lock),
                    (&release, &sql.release),
                    (&release, &sql.unregister),
                    (&release, &sql.refresh_notify),
                    (&force, &sql.lock),
                    (&force, &sql.force_free),
                    (&force, &sql.purge),
                    (&force, &sql.refresh_notify),
                    (&force, &sql.leases_of),
                    (&list, &sql.leases_in_range),
                ];
                runs.extend(sql.read_token.iter().map(|read| (&acquire, read)));
                for (args, stmt) in runs {
                    let bound = stmt.bind(args);
                    assert!(
                        bound.is_ok(),
                        "{flavor:?} {mode:?}: {}: {bound:?}",
                        stmt.sql
                    );
                    let placeholders = match flavor {
                        Flavor::MySql => stmt.sql.matches('?').count(),
                        _ => stmt.params.len(),
                    };
                    assert_eq!(bound.unwrap().len(), placeholders, "{}", stmt.sql);
                }
            }
        }
    }
}
