//! fencelock's SQL lease table against the raw floors, in one run on the same server:
//!
//! - PostgreSQL, uncontended cycle (acquire + release): against a plain durable upsert on one
//!   plain sqlx connection (`INSERT … ON CONFLICT DO UPDATE … WHERE free … RETURNING token`,
//!   then an `UPDATE` that frees the row: one statement each way, like fencelock), and against
//!   `pg_advisory_lock` / `pg_advisory_unlock` on one connection (session locks: nothing
//!   written, not fenced). Two more rows split fencelock's cost: its own two statements (copied
//!   from core/src/backend/sql/dialect.rs) on one plain connection, and the same statements each
//!   on a connection checked out of a plain sqlx pool, as fencelock runs them.
//! - PostgreSQL, handoff (release call to the other contender holding the lock): fencelock's
//!   LISTEN/NOTIFY wake-up against `pg_advisory_lock`'s own blocking wait in the server.
//! - SQLite, uncontended cycle, fencelock on a temporary file against the same kind of upsert
//!   through sqlx's SQLite driver on the same file (WAL, synchronous=NORMAL, as fencelock opens
//!   it), one autocommit statement each way; and fencelock's own statements, each write inside
//!   `BEGIN IMMEDIATE` … `COMMIT` as fencelock runs them, on that plain connection.
//! - MariaDB, uncontended cycle against `GET_LOCK` / `RELEASE_LOCK` (session locks, nothing
//!   written), with fencelock's own statements on one plain connection between them; and the
//!   handoff: fencelock's waiter, woken by its Locker's watcher (MariaDB has no notifications:
//!   the watcher reads the waited row every 2-20 ms), against `GET_LOCK` blocking in the server.
//!
//! Raw and fencelock runs alternate in rounds, so a change in the machine's load hits both.
//! Handoffs alternate strictly between the two contenders: a contender asks again only once
//! the other holds, and every holder keeps the lock for 2 ms first (`BENCH_HOLD_MS` changes
//! it), so the lock is always handed to a waiter already waiting (ops/s of the handoff rows
//! includes that hold).
//!
//! Usage: `cargo run --release -p fencelock-bench --bin sql_floor [postgres] [sqlite] [mariadb]`
//! (default: all three). Servers from `bash tests/servers.sh start postgres mariadb`; URLs from
//! `FENCELOCK_TEST_POSTGRES_URL` and `FENCELOCK_TEST_MARIADB_URL`, else the test servers'
//! defaults. fencelock uses its own table, `fencelock_bench_locks`, so tests running at the same
//! time are not disturbed.

use std::str::FromStr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fencelock::{HolderDescription, Lease, LockOptions, Locker};
use fencelock_bench::{Contender, Run, handoff, header, hold, row};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection};

const CYCLES: usize = 3000;
const HANDOFFS: usize = 400;
/// Handoffs to a polling waiter take tens of milliseconds each.
const POLLED_HANDOFFS: usize = 100;
const ROUNDS: usize = 4;
/// Handoffs before the timed ones in each run (the first wait opens the LISTEN connection).
const ADVISORY_KEY: i64 = 0x6665_6e63_6562_6e63;

/// Times `n` sequential runs of `body` (with `i` bound to the run's index) inside an async
/// fn; gives the samples and the time spent.
macro_rules! timed {
    ($n:expr, |$i:pat_param| $body:block) => {{
        let n: usize = $n;
        let mut samples = Vec::with_capacity(n);
        let started = Instant::now();
        for $i in 0..n {
            let t = Instant::now();
            $body
            samples.push(t.elapsed());
        }
        (samples, started.elapsed())
    }};
}

async fn cycle_fencelock(locker: &Locker, n: usize) -> (Vec<Duration>, Duration) {
    let options = LockOptions::default();
    timed!(n, |_| {
        let lease = locker.acquire("bench-uncontended", &options).await.unwrap();
        lease.release().await.unwrap();
    })
}

/// `base` with fencelock's `table` option added.
fn fencelock_url(base: &str) -> String {
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}table=fencelock_bench_locks")
}

fn unix_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

fn owner(i: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; 16];
    bytes[..8].copy_from_slice(&(i as u64).to_be_bytes());
    bytes[8..].copy_from_slice(&(std::process::id() as u64).to_be_bytes());
    bytes
}

// ------------------------------------------------------------------ handoffs

/// One side of a handoff: `take` returns once it holds the lock, `give` releases it.
struct FencelockSide {
    locker: Locker,
    lease: Option<Lease>,
}

impl FencelockSide {
    async fn pair(url: &str) -> [FencelockSide; 2] {
        [
            FencelockSide {
                locker: Locker::connect(url).await.unwrap(),
                lease: None,
            },
            FencelockSide {
                locker: Locker::connect(url).await.unwrap(),
                lease: None,
            },
        ]
    }
}

impl Contender for FencelockSide {
    async fn take(&mut self) {
        self.lease = Some(
            self.locker
                .acquire("bench-handoff", &LockOptions::default())
                .await
                .unwrap(),
        );
    }

    async fn give(&mut self) {
        self.lease.take().unwrap().release().await.unwrap();
    }
}

// ---------------------------------------------------------------- PostgreSQL

struct AdvisorySide {
    conn: PgConnection,
}

impl Contender for AdvisorySide {
    async fn take(&mut self) {
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(ADVISORY_KEY)
            .execute(&mut self.conn)
            .await
            .unwrap();
    }

    async fn give(&mut self) {
        let freed: bool = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
            .bind(ADVISORY_KEY)
            .fetch_one(&mut self.conn)
            .await
            .unwrap();
        assert!(freed);
    }
}

async fn pg_cycle_advisory(conn: &mut PgConnection, n: usize) -> (Vec<Duration>, Duration) {
    timed!(n, |_| {
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(ADVISORY_KEY)
            .execute(&mut *conn)
            .await
            .unwrap();
        let freed: bool = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
            .bind(ADVISORY_KEY)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert!(freed);
    })
}

const PG_RAW_TABLE: &str = "CREATE TABLE IF NOT EXISTS bench_raw_locks (name TEXT PRIMARY KEY, owner BYTEA, \
    token BIGINT NOT NULL DEFAULT 1, expires_at TIMESTAMPTZ)";
const PG_RAW_TAKE: &str = "INSERT INTO bench_raw_locks AS l (name, owner, expires_at) \
    VALUES ($1, $2, now() + interval '30 seconds') \
    ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, token = l.token + 1, expires_at = excluded.expires_at \
    WHERE l.owner IS NULL OR l.expires_at < now() RETURNING l.token";
const PG_RAW_FREE: &str =
    "UPDATE bench_raw_locks SET owner = NULL, expires_at = NULL WHERE name = $1 AND owner = $2";

async fn pg_cycle_upsert(conn: &mut PgConnection, n: usize) -> (Vec<Duration>, Duration) {
    timed!(n, |i| {
        let owner = owner(i);
        let token: Option<i64> = sqlx::query_scalar(PG_RAW_TAKE)
            .bind("bench-uncontended")
            .bind(&owner)
            .fetch_optional(&mut *conn)
            .await
            .unwrap();
        assert!(token.is_some(), "the raw lock was not free");
        let freed = sqlx::query(PG_RAW_FREE)
            .bind("bench-uncontended")
            .bind(&owner)
            .execute(&mut *conn)
            .await
            .unwrap();
        assert_eq!(freed.rows_affected(), 1);
    })
}

// fencelock's own statements, as core/src/backend/sql/dialect.rs compiles them for
// PostgreSQL (table fencelock_bench_locks): run on one plain connection, they show what the
// SQL costs apart from fencelock's client (its pool, its lease bookkeeping).
const PG_FL_TAKE: &str = "WITH taken AS ( \
    INSERT INTO fencelock_bench_locks AS l (name, owner, token, expires_at, holder) \
    VALUES ($1, $2, (extract(epoch from clock_timestamp()) * 1000000)::bigint, \
      clock_timestamp() + $3::bigint * interval '1 microsecond', $4) \
    ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, \
      token = GREATEST(l.token + 1, (extract(epoch from clock_timestamp()) * 1000000)::bigint), \
      expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond', holder = excluded.holder \
    WHERE l.owner IS NULL OR l.expires_at < clock_timestamp() RETURNING l.token) \
    SELECT (SELECT token FROM taken), \
      (SELECT (extract(epoch from (expires_at - clock_timestamp())) * 1000000)::bigint \
       FROM fencelock_bench_locks WHERE name = $1)";
const PG_FL_FREE: &str = "WITH released AS (UPDATE fencelock_bench_locks SET owner = NULL, expires_at = NULL, \
    holder = NULL WHERE name = $1 AND owner = $2 RETURNING 1) SELECT pg_notify($3, '') FROM released";

async fn pg_fl_take(conn: &mut PgConnection, owner: &[u8], holder: &str) {
    let (token, _left): (Option<i64>, Option<i64>) = sqlx::query_as(PG_FL_TAKE)
        .bind(b"bench-plain".to_vec())
        .bind(owner)
        .bind(30_000_000i64)
        .bind(holder)
        .fetch_one(conn)
        .await
        .unwrap();
    assert!(token.is_some(), "the lock was not free");
}

async fn pg_fl_free(conn: &mut PgConnection, owner: &[u8]) {
    let freed = sqlx::query(PG_FL_FREE)
        .bind(b"bench-plain".to_vec())
        .bind(owner)
        .bind("fencelock_bench_plain")
        .execute(conn)
        .await
        .unwrap();
    assert_eq!(freed.rows_affected(), 1);
}

async fn pg_cycle_fencemutex_sql(conn: &mut PgConnection, n: usize) -> (Vec<Duration>, Duration) {
    let holder = HolderDescription::of_this_process("rust", None).to_json();
    timed!(n, |i| {
        let owner = owner(i);
        pg_fl_take(&mut *conn, &owner, &holder).await;
        pg_fl_free(&mut *conn, &owner).await;
    })
}

/// The same statements, each on a connection checked out of a plain sqlx pool as fencelock
/// does (4 connections, no test before acquire). sqlx pings every connection returned to its
/// pool, in a task of its own.
async fn pg_cycle_fencemutex_sql_pooled(pool: &PgPool, n: usize) -> (Vec<Duration>, Duration) {
    let holder = HolderDescription::of_this_process("rust", None).to_json();
    timed!(n, |i| {
        let owner = owner(i);
        pg_fl_take(&mut pool.acquire().await.unwrap(), &owner, &holder).await;
        pg_fl_free(&mut pool.acquire().await.unwrap(), &owner).await;
    })
}

async fn postgres(url: &str) {
    let connect = PgConnectOptions::from_str(url).unwrap();
    let mut advisory = connect.connect().await.unwrap();
    let mut upsert = connect.connect().await.unwrap();
    sqlx::query(PG_RAW_TABLE)
        .execute(&mut upsert)
        .await
        .unwrap();
    let settings: (String, String, String) = sqlx::query_as(
        "SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit')",
    )
    .fetch_one(&mut upsert)
    .await
    .unwrap();
    header(&format!(
        "PostgreSQL {} at {}; fsync={}, synchronous_commit={}; {CYCLES} uncontended cycles, {HANDOFFS} handoffs \
         (hold {:?}), {ROUNDS} alternating rounds",
        settings.0,
        connect.get_host(),
        settings.1,
        settings.2,
        hold()
    ));
    let locker = Locker::connect(&fencelock_url(url)).await.unwrap();
    let mut plain = connect.connect().await.unwrap();
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .test_before_acquire(false)
        .connect_lazy_with(connect.clone());
    pg_cycle_advisory(&mut advisory, 100).await;
    pg_cycle_upsert(&mut upsert, 100).await;
    pg_cycle_fencemutex_sql(&mut plain, 100).await;
    pg_cycle_fencemutex_sql_pooled(&pool, 100).await;
    cycle_fencelock(&locker, 100).await;
    let mut runs: [Run; 5] = Default::default();
    for _ in 0..ROUNDS {
        runs[0].add(pg_cycle_advisory(&mut advisory, CYCLES / ROUNDS).await);
        runs[1].add(pg_cycle_upsert(&mut upsert, CYCLES / ROUNDS).await);
        runs[2].add(pg_cycle_fencemutex_sql(&mut plain, CYCLES / ROUNDS).await);
        runs[3].add(pg_cycle_fencemutex_sql_pooled(&pool, CYCLES / ROUNDS).await);
        runs[4].add(cycle_fencelock(&locker, CYCLES / ROUNDS).await);
    }
    locker.close().await;
    pool.close().await;
    let [adv, ups, sql, pooled, ours] = runs.map(Run::stats);
    row(
        "uncontended cycle, raw floor: upsert … WHERE free RETURNING token + UPDATE to free",
        &ups,
        None,
    );
    row(
        "uncontended cycle, raw anchor: pg_advisory_lock + pg_advisory_unlock (one connection, nothing written)",
        &adv,
        Some(&ups),
    );
    row(
        "uncontended cycle, fencelock's own two statements on one plain connection",
        &sql,
        Some(&ups),
    );
    row(
        "uncontended cycle, fencelock's own two statements, each on a connection from a plain sqlx pool",
        &pooled,
        Some(&ups),
    );
    row(
        "uncontended cycle, fencelock (the same statements through its pool; lease bookkeeping)",
        &ours,
        Some(&ups),
    );

    let (mut adv, mut ours) = (Run::default(), Run::default());
    for _ in 0..ROUNDS {
        let sides = [
            AdvisorySide {
                conn: connect.connect().await.unwrap(),
            },
            AdvisorySide {
                conn: connect.connect().await.unwrap(),
            },
        ];
        adv.add(handoff(sides, HANDOFFS / ROUNDS).await);
        let sides = FencelockSide::pair(&fencelock_url(url)).await;
        let lockers: Vec<Locker> = sides.iter().map(|s| s.locker.clone()).collect();
        ours.add(handoff(sides, HANDOFFS / ROUNDS).await);
        for l in lockers {
            l.close().await;
        }
    }
    let (adv, ours) = (adv.stats(), ours.stats());
    row(
        "handoff, raw floor: pg_advisory_lock blocking in the server",
        &adv,
        None,
    );
    row(
        "handoff, fencelock (LISTEN/NOTIFY wake-up, then upsert)",
        &ours,
        Some(&adv),
    );
}

// -------------------------------------------------------------------- SQLite

const LITE_RAW_TABLE: &str = "CREATE TABLE IF NOT EXISTS bench_raw_locks (name TEXT NOT NULL PRIMARY KEY, \
    owner BLOB, token INTEGER NOT NULL, expires_at INTEGER) WITHOUT ROWID";
const LITE_RAW_TAKE: &str = "INSERT INTO bench_raw_locks (name, owner, token, expires_at) VALUES (?1, ?2, 1, ?3 + 30000000) \
    ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, token = bench_raw_locks.token + 1, \
    expires_at = excluded.expires_at \
    WHERE bench_raw_locks.owner IS NULL OR bench_raw_locks.expires_at < ?3 RETURNING token";
const LITE_RAW_FREE: &str =
    "UPDATE bench_raw_locks SET owner = NULL, expires_at = NULL WHERE name = ?1 AND owner = ?2";

async fn lite_cycle_upsert(conn: &mut SqliteConnection, n: usize) -> (Vec<Duration>, Duration) {
    timed!(n, |i| {
        let owner = owner(i);
        let token: Option<i64> = sqlx::query_scalar(LITE_RAW_TAKE)
            .bind("bench-uncontended")
            .bind(&owner)
            .bind(unix_micros())
            .fetch_optional(&mut *conn)
            .await
            .unwrap();
        assert!(token.is_some(), "the raw lock was not free");
        let freed = sqlx::query(LITE_RAW_FREE)
            .bind("bench-uncontended")
            .bind(&owner)
            .execute(&mut *conn)
            .await
            .unwrap();
        assert_eq!(freed.rows_affected(), 1);
    })
}

// fencelock's own statements, as core/src/backend/sql/dialect.rs compiles them for SQLite
// (table fencelock_bench_locks), each write in BEGIN IMMEDIATE … COMMIT as fencelock runs it.
const LITE_FL_TAKE: &str = "INSERT INTO fencelock_bench_locks (name, owner, token, expires_at, holder) \
    VALUES (?1, ?2, ?3, ?3 + ?4, ?5) \
    ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, token = MAX(fencelock_bench_locks.token + 1, ?3), \
      expires_at = excluded.expires_at, holder = excluded.holder \
    WHERE fencelock_bench_locks.owner IS NULL OR fencelock_bench_locks.expires_at < ?3 RETURNING token";
const LITE_FL_FREE: &str = "UPDATE fencelock_bench_locks SET owner = NULL, expires_at = NULL, holder = NULL WHERE name = ?1 AND owner = ?2";

async fn lite_cycle_fencemutex_sql(
    conn: &mut SqliteConnection,
    n: usize,
) -> (Vec<Duration>, Duration) {
    let holder = HolderDescription::of_this_process("rust", None).to_json();
    timed!(n, |i| {
        let owner = owner(i);
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *conn)
            .await
            .unwrap();
        let token: Option<i64> = sqlx::query_scalar(LITE_FL_TAKE)
            .bind(b"bench-plain".to_vec())
            .bind(&owner)
            .bind(unix_micros())
            .bind(30_000_000i64)
            .bind(&holder)
            .fetch_optional(&mut *conn)
            .await
            .unwrap();
        assert!(token.is_some(), "the lock was not free");
        sqlx::query("COMMIT").execute(&mut *conn).await.unwrap();
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *conn)
            .await
            .unwrap();
        let freed = sqlx::query(LITE_FL_FREE)
            .bind(b"bench-plain".to_vec())
            .bind(&owner)
            .execute(&mut *conn)
            .await
            .unwrap();
        assert_eq!(freed.rows_affected(), 1);
        sqlx::query("COMMIT").execute(&mut *conn).await.unwrap();
    })
}

async fn sqlite() {
    let path = std::env::temp_dir().join(format!("fencelock-bench-{}.db", std::process::id()));
    let connect = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(5));
    let mut raw = connect.connect().await.unwrap();
    sqlx::query(LITE_RAW_TABLE).execute(&mut raw).await.unwrap();
    let url = fencelock_url(&format!("sqlite://{}", path.display()));
    let locker = Locker::connect(&url).await.unwrap();
    let version: String = sqlx::query_scalar("SELECT sqlite_version()")
        .fetch_one(&mut raw)
        .await
        .unwrap();
    header(&format!(
        "SQLite {version}, file {}; journal_mode=WAL, synchronous=NORMAL (fencelock's settings, used by both); \
         {CYCLES} uncontended cycles, {ROUNDS} alternating rounds",
        path.display()
    ));
    lite_cycle_upsert(&mut raw, 100).await;
    lite_cycle_fencemutex_sql(&mut raw, 100).await;
    cycle_fencelock(&locker, 100).await;
    let (mut auto, mut immediate, mut ours) = (Run::default(), Run::default(), Run::default());
    for _ in 0..ROUNDS {
        auto.add(lite_cycle_upsert(&mut raw, CYCLES / ROUNDS).await);
        immediate.add(lite_cycle_fencemutex_sql(&mut raw, CYCLES / ROUNDS).await);
        ours.add(cycle_fencelock(&locker, CYCLES / ROUNDS).await);
    }
    locker.close().await;
    raw.close().await.unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let (auto, immediate, ours) = (auto.stats(), immediate.stats(), ours.stats());
    row(
        "uncontended cycle, raw floor: upsert RETURNING token + UPDATE to free (autocommit)",
        &auto,
        None,
    );
    row(
        "uncontended cycle, fencelock's own statements, each write in BEGIN IMMEDIATE … COMMIT, one plain connection",
        &immediate,
        Some(&auto),
    );
    row(
        "uncontended cycle, fencelock (the same through its pool of 2; lease bookkeeping)",
        &ours,
        Some(&auto),
    );
}

// ------------------------------------------------------------------- MariaDB

struct GetLockSide {
    conn: MySqlConnection,
}

async fn get_lock(conn: &mut MySqlConnection) {
    let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK('fencelock-bench', 60)")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(got, Some(1));
}

async fn release_lock(conn: &mut MySqlConnection) {
    let freed: Option<i64> = sqlx::query_scalar("SELECT RELEASE_LOCK('fencelock-bench')")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(freed, Some(1));
}

impl Contender for GetLockSide {
    async fn take(&mut self) {
        get_lock(&mut self.conn).await;
    }

    async fn give(&mut self) {
        release_lock(&mut self.conn).await;
    }
}

async fn my_cycle_get_lock(conn: &mut MySqlConnection, n: usize) -> (Vec<Duration>, Duration) {
    timed!(n, |_| {
        get_lock(&mut *conn).await;
        release_lock(&mut *conn).await;
    })
}

// fencelock's own statements, as core/src/backend/sql/mutex_sql.rs compiles them for MySQL and
// MariaDB (table fencelock_bench_locks), on a free row that was taken before: one autocommit
// UPDATE that takes it and mints the token as its LAST_INSERT_ID; an autocommit UPDATE to free
// it. (A held, missing or never-taken row goes on to a transaction, not timed here.)
const MY_FL_SEED: &str = "INSERT IGNORE INTO fencelock_bench_locks (name, owner, token, expires_at, holder) \
    VALUES (?, NULL, 1, NULL, NULL)";
const MY_FL_TAKE_FREE: &str = "UPDATE fencelock_bench_locks SET owner = ?, \
    token = LAST_INSERT_ID(GREATEST(token + 1, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)))), \
    expires_at = TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(6)), holder = ? \
    WHERE name = ? AND token > 0 AND (owner IS NULL OR expires_at < UTC_TIMESTAMP(6))";
const MY_FL_FREE: &str = "UPDATE fencelock_bench_locks SET owner = NULL, expires_at = NULL, holder = NULL WHERE name = ? AND owner = ?";

async fn my_cycle_fencemutex_sql(
    conn: &mut MySqlConnection,
    n: usize,
) -> (Vec<Duration>, Duration) {
    let holder = HolderDescription::of_this_process("rust", None).to_json();
    let name = b"bench-plain".to_vec();
    sqlx::query(MY_FL_SEED)
        .bind(&name)
        .execute(&mut *conn)
        .await
        .unwrap();
    timed!(n, |i| {
        let owner = owner(i);
        let taken = sqlx::query(MY_FL_TAKE_FREE)
            .bind(&owner)
            .bind(30_000_000i64)
            .bind(&holder)
            .bind(&name)
            .execute(&mut *conn)
            .await
            .unwrap();
        assert_eq!(taken.rows_affected(), 1, "the lock was not free");
        assert!(taken.last_insert_id() > 0, "no token in the answer");
        let freed = sqlx::query(MY_FL_FREE)
            .bind(&name)
            .bind(&owner)
            .execute(&mut *conn)
            .await
            .unwrap();
        assert_eq!(freed.rows_affected(), 1);
    })
}

async fn mariadb(url: &str) {
    let connect = MySqlConnectOptions::from_str(url).unwrap();
    let mut raw = connect.connect().await.unwrap();
    let settings: (String, i64) =
        sqlx::query_as("SELECT VERSION(), CAST(@@innodb_flush_log_at_trx_commit AS SIGNED)")
            .fetch_one(&mut raw)
            .await
            .unwrap();
    header(&format!(
        "MariaDB {} at {}; innodb_flush_log_at_trx_commit={}; {CYCLES} uncontended cycles, {POLLED_HANDOFFS} \
         handoffs (hold {:?}), {ROUNDS} alternating rounds",
        settings.0,
        connect.get_host(),
        settings.1,
        hold()
    ));
    let locker = Locker::connect(&fencelock_url(url)).await.unwrap();
    let mut plain = connect
        .clone()
        .timezone(Some("+00:00".to_string()))
        .connect()
        .await
        .unwrap();
    my_cycle_get_lock(&mut raw, 100).await;
    my_cycle_fencemutex_sql(&mut plain, 100).await;
    cycle_fencelock(&locker, 100).await;
    let (mut floor, mut sql, mut ours) = (Run::default(), Run::default(), Run::default());
    for _ in 0..ROUNDS {
        floor.add(my_cycle_get_lock(&mut raw, CYCLES / ROUNDS).await);
        sql.add(my_cycle_fencemutex_sql(&mut plain, CYCLES / ROUNDS).await);
        ours.add(cycle_fencelock(&locker, CYCLES / ROUNDS).await);
    }
    locker.close().await;
    let (floor, sql, ours) = (floor.stats(), sql.stats(), ours.stats());
    row(
        "uncontended cycle, raw floor: GET_LOCK + RELEASE_LOCK (one connection, nothing written)",
        &floor,
        None,
    );
    row(
        "uncontended cycle, fencelock's own statements on one plain connection (UPDATE of the free row minting LAST_INSERT_ID; UPDATE to free)",
        &sql,
        Some(&floor),
    );
    row(
        "uncontended cycle, fencelock (the same through its pool; lease bookkeeping)",
        &ours,
        Some(&floor),
    );

    let (mut floor, mut ours) = (Run::default(), Run::default());
    for _ in 0..ROUNDS {
        let sides = [
            GetLockSide {
                conn: connect.connect().await.unwrap(),
            },
            GetLockSide {
                conn: connect.connect().await.unwrap(),
            },
        ];
        floor.add(handoff(sides, POLLED_HANDOFFS / ROUNDS).await);
        let sides = FencelockSide::pair(&fencelock_url(url)).await;
        let lockers: Vec<Locker> = sides.iter().map(|s| s.locker.clone()).collect();
        ours.add(handoff(sides, POLLED_HANDOFFS / ROUNDS).await);
        for l in lockers {
            l.close().await;
        }
    }
    let (floor, ours) = (floor.stats(), ours.stats());
    row(
        "handoff, raw floor: GET_LOCK blocking in the server",
        &floor,
        None,
    );
    row(
        "handoff, fencelock (waiter woken by its Locker's watcher reading the row every 2-20 ms)",
        &ours,
        Some(&floor),
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut which: Vec<String> = std::env::args().skip(1).collect();
    if which.is_empty() {
        which = vec!["postgres".into(), "sqlite".into(), "mariadb".into()];
    }
    let env = |key: &str, default: &str| std::env::var(key).unwrap_or_else(|_| default.to_string());
    for backend in which {
        match backend.as_str() {
            "postgres" => {
                postgres(&env(
                    "FENCELOCK_TEST_POSTGRES_URL",
                    "postgres://fencelock:fencelock-test@127.0.0.1:5432/fencelock_test",
                ))
                .await
            }
            "sqlite" => sqlite().await,
            "mariadb" => {
                mariadb(&env(
                    "FENCELOCK_TEST_MARIADB_URL",
                    "mariadb://fencelock:fencelock-test@127.0.0.1:3306/fencelock_test",
                ))
                .await
            }
            other => panic!("unknown backend {other:?}: postgres, sqlite or mariadb"),
        }
    }
}
