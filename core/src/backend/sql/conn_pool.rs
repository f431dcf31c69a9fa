//! The statement pool of a SQL Locker: at most `size` connections, lent one at a time.
//!
//! Why not sqlx's pool: sqlx 0.9 pings every connection as it goes back to its pool
//! (unconditionally), a second round trip for every statement, run in a task that competes
//! with the statements for the cores (bench/RESULTS.md: it took PostgreSQL's uncontended cycle
//! from 0.87x of the raw upsert floor to 0.53x). The ping is there because a statement whose
//! future was dropped (a timeout, a cancelled acquire) can leave its connection with an answer
//! still to read or inside a transaction. This pool knows instead: a connection goes back only
//! when its last statement ran to its end and no transaction is left open on it; any other
//! connection is closed (the server rolls back what it left). A connection idle for longer
//! than `ping_after` is pinged before it is lent again, as before.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::{ConnectOptions, Connection, Database, Executor};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A connection idle for this long is closed rather than lent (sqlx's default idle timeout).
const IDLE_LIMIT: Duration = Duration::from_secs(600);

/// What a pool is made of.
pub(crate) struct PoolSettings<DB: Database> {
    pub connect: <DB::Connection as Connection>::Options,
    /// Statements run on every new connection before it is first lent (session settings).
    pub setup: Vec<String>,
    pub size: u32,
    /// How long a caller waits for a connection: a free slot, then the connect.
    pub acquire_timeout: Duration,
    /// A connection idle for longer is pinged before it is lent (none: never).
    pub ping_after: Option<Duration>,
}

struct Idle<C> {
    conn: C,
    since: Instant,
}

pub(crate) struct ConnPool<DB: Database> {
    settings: PoolSettings<DB>,
    slots: Arc<Semaphore>,
    idle: Mutex<VecDeque<Idle<DB::Connection>>>,
}

impl<DB: Database> ConnPool<DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    pub fn new(settings: PoolSettings<DB>) -> Arc<Self> {
        Arc::new(ConnPool {
            slots: Arc::new(Semaphore::new(settings.size as usize)),
            settings,
            idle: Mutex::new(VecDeque::new()),
        })
    }

    /// A connection of the pool, waiting at most the acquire timeout for a slot and a connect.
    pub async fn lend(self: &Arc<Self>) -> Result<Lent<DB>, sqlx::Error> {
        let timeout = self.settings.acquire_timeout;
        let started = Instant::now();
        let permit = match tokio::time::timeout(timeout, self.slots.clone().acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(sqlx::Error::PoolClosed),
            Err(_) => return Err(sqlx::Error::PoolTimedOut),
        };
        while let Some(Idle { mut conn, since }) = self.take_idle() {
            let stale = self
                .settings
                .ping_after
                .is_some_and(|p| since.elapsed() > p);
            if !stale || conn.ping().await.is_ok() {
                return Ok(Lent::new(conn, permit, self.clone()));
            }
        }
        let left = timeout.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, self.open()).await {
            Ok(conn) => Ok(Lent::new(conn?, permit, self.clone())),
            Err(_) => Err(sqlx::Error::PoolTimedOut),
        }
    }

    /// A new connection with the pool's settings, outside its slots.
    pub async fn open(&self) -> Result<DB::Connection, sqlx::Error> {
        let mut conn = self.settings.connect.connect().await?;
        for statement in &self.settings.setup {
            sqlx::raw_sql(sqlx::AssertSqlSafe(statement.clone()))
                .execute(&mut conn)
                .await?;
        }
        Ok(conn)
    }

    /// Opens one connection now and keeps it idle (a database that must be reachable at once).
    pub async fn open_one(&self) -> Result<(), sqlx::Error> {
        let conn = self.open().await?;
        self.give_back(conn);
        Ok(())
    }

    /// Refuses new loans and closes the idle connections; a lent one closes when it comes back.
    pub async fn close(&self) {
        self.slots.close();
        let idle: Vec<_> = self.lock_idle().drain(..).collect();
        for Idle { conn, .. } in idle {
            let _ = conn.close().await;
        }
    }

    fn take_idle(&self) -> Option<Idle<DB::Connection>> {
        let mut idle = self.lock_idle();
        let expired: Vec<_> = std::iter::from_fn(|| {
            idle.front()
                .is_some_and(|i| i.since.elapsed() > IDLE_LIMIT)
                .then(|| idle.pop_front())
                .flatten()
        })
        .collect();
        let taken = idle.pop_back();
        drop(idle);
        drop(expired);
        taken
    }

    fn give_back(&self, conn: DB::Connection) {
        if self.slots.is_closed() {
            return;
        }
        self.lock_idle().push_back(Idle {
            conn,
            since: Instant::now(),
        });
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, VecDeque<Idle<DB::Connection>>> {
        // The list is left whole by every holder, so a panic elsewhere cannot break it.
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a lent connection went through, which decides whether it may be lent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Its last statement ran to its end, outside a transaction.
    Clean,
    /// Inside a transaction that a rollback can end.
    InTransaction,
    /// A statement started and was not seen to end (its future was dropped), or the
    /// connection failed: it is closed, not lent again.
    Unknown,
}

/// A connection lent by a [`ConnPool`]; it goes back when dropped.
pub(crate) struct Lent<DB: Database>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    conn: Option<DB::Connection>,
    permit: Option<OwnedSemaphorePermit>,
    home: Arc<ConnPool<DB>>,
    state: State,
    /// The state to return to once the statement under way ends.
    settled: State,
}

impl<DB: Database> Lent<DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    fn new(conn: DB::Connection, permit: OwnedSemaphorePermit, home: Arc<ConnPool<DB>>) -> Self {
        Lent {
            conn: Some(conn),
            permit: Some(permit),
            home,
            state: State::Clean,
            settled: State::Clean,
        }
    }

    /// The connection, for a statement that is about to run: until [`Lent::ended`] says how it
    /// ended, the connection counts as unknown.
    pub fn start(&mut self) -> &mut DB::Connection {
        if self.state != State::Unknown {
            self.settled = self.state;
            self.state = State::Unknown;
        }
        self.conn
            .as_mut()
            .expect("a lent connection is present until dropped")
    }

    /// Records how the statement begun by [`Lent::start`] ended. An error the database
    /// answered leaves the connection usable; any other (I/O, protocol) does not.
    pub fn ended<T>(&mut self, outcome: &Result<T, sqlx::Error>) {
        let usable = match outcome {
            Ok(_) => true,
            Err(e) => matches!(
                e,
                sqlx::Error::Database(_)
                    | sqlx::Error::RowNotFound
                    | sqlx::Error::ColumnDecode { .. }
                    | sqlx::Error::ColumnNotFound(_)
                    | sqlx::Error::ColumnIndexOutOfBounds { .. }
                    | sqlx::Error::Decode(_)
                    | sqlx::Error::Encode(_)
                    | sqlx::Error::TypeNotFound { .. }
            ),
        };
        if usable {
            self.state = self.settled;
        }
    }

    /// Starts a transaction with `begin` (`BEGIN` unless the driver needs another).
    pub async fn begin(&mut self, begin: &'static str) -> Result<(), sqlx::Error> {
        let outcome = sqlx::raw_sql(begin).execute(self.start()).await;
        self.ended(&outcome);
        if outcome.is_ok() {
            self.state = State::InTransaction;
        }
        outcome.map(|_| ())
    }

    /// Commits (or rolls back) the transaction begun by [`Lent::begin`].
    pub async fn end(&mut self, commit: bool) -> Result<(), sqlx::Error> {
        let sql = if commit { "COMMIT" } else { "ROLLBACK" };
        let outcome = sqlx::raw_sql(sql).execute(self.start()).await;
        if outcome.is_ok() {
            self.settled = State::Clean;
        }
        self.ended(&outcome);
        outcome.map(|_| ())
    }
}

impl<DB: Database> Drop for Lent<DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    fn drop(&mut self) {
        let (Some(mut conn), permit) = (self.conn.take(), self.permit.take()) else {
            return;
        };
        match self.state {
            State::Clean => self.home.give_back(conn),
            // A transaction left open by an early return: roll it back in a task of its own,
            // the slot still taken, and lend the connection again if that works.
            State::InTransaction => {
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let home = self.home.clone();
                    runtime.spawn(async move {
                        let rolled_back = sqlx::raw_sql("ROLLBACK").execute(&mut conn).await;
                        if rolled_back.is_ok() {
                            home.give_back(conn);
                        }
                        drop(permit);
                    });
                }
            }
            State::Unknown => {}
        }
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use std::str::FromStr;

    use sqlx::Row;
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};

    use super::*;

    fn pool(dir: &tempfile::TempDir, size: u32) -> Arc<ConnPool<sqlx::Sqlite>> {
        let connect = SqliteConnectOptions::from_str("sqlite://")
            .unwrap()
            .filename(dir.path().join("pool.db"))
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal);
        ConnPool::new(PoolSettings {
            connect,
            setup: vec!["CREATE TABLE IF NOT EXISTS t (v INTEGER)".to_string()],
            size,
            acquire_timeout: Duration::from_millis(300),
            ping_after: None,
        })
    }

    fn idle(pool: &ConnPool<sqlx::Sqlite>) -> usize {
        pool.lock_idle().len()
    }

    async fn count(lent: &mut Lent<sqlx::Sqlite>) -> i64 {
        let row = sqlx::query("SELECT count(*) FROM t")
            .fetch_one(lent.start())
            .await;
        lent.ended(&row);
        row.unwrap().get(0)
    }

    #[tokio::test]
    async fn a_connection_whose_statements_ended_is_lent_again() {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool(&dir, 1);
        let mut lent = pool.lend().await.unwrap();
        assert_eq!(count(&mut lent).await, 0);
        drop(lent);
        assert_eq!(idle(&pool), 1, "the connection went back");
        let failed = sqlx::query("SELECT * FROM no_such_table")
            .fetch_all(pool.lend().await.unwrap().start())
            .await;
        assert!(failed.is_err());
        // The statement's future ended with the database's answer, but `ended` was not called:
        // the connection counts as unknown and is closed.
        assert_eq!(
            idle(&pool),
            0,
            "an unconfirmed statement closes its connection"
        );
        let mut lent = pool.lend().await.unwrap();
        let failed = sqlx::query("SELECT * FROM no_such_table")
            .fetch_all(lent.start())
            .await;
        lent.ended(&failed);
        drop(lent);
        assert_eq!(
            idle(&pool),
            1,
            "an error the database answered leaves it usable"
        );
    }

    #[tokio::test]
    async fn a_statement_cut_short_closes_its_connection() {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool(&dir, 1);
        let mut lent = pool.lend().await.unwrap();
        let slow = sqlx::query(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000000) \
             SELECT count(*) FROM n",
        )
        .fetch_one(lent.start());
        let cut = tokio::time::timeout(Duration::from_millis(20), slow).await;
        assert!(cut.is_err(), "the statement was cut short");
        drop(lent);
        assert_eq!(idle(&pool), 0);
        let mut again = pool.lend().await.unwrap();
        assert_eq!(
            count(&mut again).await,
            0,
            "a new connection takes the slot"
        );
    }

    #[tokio::test]
    async fn a_transaction_left_open_is_rolled_back_before_the_connection_is_lent_again() {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool(&dir, 1);
        let mut lent = pool.lend().await.unwrap();
        lent.begin("BEGIN IMMEDIATE").await.unwrap();
        let inserted = sqlx::query("INSERT INTO t (v) VALUES (1)")
            .execute(lent.start())
            .await;
        lent.ended(&inserted);
        inserted.unwrap();
        drop(lent);
        // The rollback runs in a task that holds the only slot until it is done.
        let mut next = pool.lend().await.unwrap();
        assert_eq!(count(&mut next).await, 0, "the insert was rolled back");
        next.begin("BEGIN IMMEDIATE").await.unwrap();
        next.end(true).await.unwrap();
        drop(next);
        assert_eq!(idle(&pool), 1, "the rolled-back connection was lent again");
    }

    #[tokio::test]
    async fn lending_waits_for_a_free_slot_within_the_acquire_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool(&dir, 1);
        let lent = pool.lend().await.unwrap();
        assert!(matches!(pool.lend().await, Err(sqlx::Error::PoolTimedOut)));
        let waiting = tokio::spawn({
            let pool = pool.clone();
            async move { pool.lend().await.map(|_| ()) }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(lent);
        waiting.await.unwrap().unwrap();
        pool.close().await;
        assert!(matches!(pool.lend().await, Err(sqlx::Error::PoolClosed)));
    }
}
