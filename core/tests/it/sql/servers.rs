//! The SQL lease table and fence on real PostgreSQL and MariaDB servers (started by
//! `tests/servers.sh start postgres mariadb`). Each scenario runs on both, as
//! `<scenario>::postgres` and `<scenario>::mariadb`; every test uses tables of its own, so they
//! run side by side. Scenarios that restart a server are in core/tests/faults/sql.rs; the lock contract
//! itself runs on both, with every other backend, in the conformance suite (core/tests/it/conformance).

use std::collections::HashSet;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::sql::{Db, Kind, table};
use crate::support::{self, test_path, unique};
use fencelock::options::TestHook;
use fencelock::{ErrorCode, Fence, LockOptions, Locker, LockerOptions, SqlValue, Statement};

fn opts(ttl_ms: u64) -> LockOptions {
    LockOptions::default().with_ttl(Duration::from_millis(ttl_ms))
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// Each scenario, once per database.
macro_rules! on_both {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$scenario(super::support::sql::postgres()).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mariadb() {
                super::$scenario(super::support::sql::mariadb()).await
            }
        }
    )*};
}

on_both!(
    names_are_data_stored_and_locked_literally,
    deleting_a_free_row_does_not_make_tokens_go_backwards,
    fence_accepts_newer_tokens_and_rejects_stale_ones,
    a_deadlocked_fenced_write_is_run_again,
    least_privilege_role_with_create_table_false,
    concurrent_first_uses_create_the_table_once,
    eight_contenders_in_two_processes_keep_a_fenced_counter_exact,
    bad_credentials_and_options_get_typed_errors_without_secrets,
);

async fn names_are_data_stored_and_locked_literally(db: Db) {
    let t = table("names");
    let locker = Locker::connect(&db.with(&format!("table={t}")))
        .await
        .unwrap();
    let euro = "€".repeat(85); // 255 bytes of 3-byte characters
    assert_eq!(euro.len(), 255);
    let names = [
        "'; DROP TABLE fencelock_locks; --",
        "Job",
        "job",
        "job ",
        euro.as_str(),
        "a\"b'c`d\\e",
        "%_",
    ];
    let mut leases = Vec::new();
    for name in names {
        let lease = locker
            .acquire(name, &opts(10_000).with_wait(Some(Duration::ZERO)))
            .await;
        leases.push(lease.unwrap_or_else(|e| panic!("{name:?}: {e}")));
    }
    for (lease, name) in leases.iter().zip(names) {
        assert_eq!(lease.name(), name);
        assert!(locker.inspect(name).await.unwrap().held, "{name:?}");
        // A second acquire of the same name finds it held: the three job spellings are three locks.
        assert!(
            locker
                .try_acquire(name, &opts(10_000))
                .await
                .unwrap()
                .is_none(),
            "{name:?}"
        );
    }
    let raw = db.raw().await;
    let mut stored = raw.bytes(&format!("SELECT name FROM {t}")).await;
    stored.sort();
    let mut expected: Vec<Vec<u8>> = names.iter().map(|n| n.as_bytes().to_vec()).collect();
    expected.sort();
    assert_eq!(stored, expected, "names are stored byte for byte");
    for name in names {
        let n = raw
            .exec_bytes(
                &format!("UPDATE {t} SET token = token WHERE name = {}", db.p(1)),
                name.as_bytes(),
            )
            .await;
        assert_eq!(n, 1, "{name:?} matches exactly one row");
    }
    for lease in leases {
        lease.release().await.unwrap();
    }
    locker.close().await;
    raw.drop_tables(&[&t, &format!("{t}_meta")]).await;
}

async fn deleting_a_free_row_does_not_make_tokens_go_backwards(db: Db) {
    let t = table("deleted");
    let locker = Locker::connect(&db.with(&format!("table={t}")))
        .await
        .unwrap();
    let raw = db.raw().await;
    let mut last = 0;
    for _ in 0..3 {
        let lease = locker.acquire("job", &opts(10_000)).await.unwrap();
        assert!(lease.token() > last);
        last = lease.token();
        lease.release().await.unwrap();
        let info = locker.inspect("job").await.unwrap();
        assert!(!info.held);
        assert_eq!(
            info.token,
            Some(lease.token()),
            "the row and its counter stay after release"
        );
        raw.exec(&format!("DELETE FROM {t}")).await;
    }
    // A counter far ahead of the clock survives as long as its row does.
    raw.exec(&format!("UPDATE {t} SET token = 0")).await;
    let lease = locker.acquire("job", &opts(10_000)).await.unwrap();
    assert!(lease.token() > last);
    lease.release().await.unwrap();
    let far = (now_ms() as i64 * 1000) + 3_600_000_000;
    raw.exec(&format!("UPDATE {t} SET token = {far}")).await;
    let lease = locker.acquire("job", &opts(10_000)).await.unwrap();
    assert_eq!(lease.token(), far as u64 + 1);
    lease.release().await.unwrap();
    locker.close().await;
    raw.drop_tables(&[&t, &format!("{t}_meta")]).await;
}

async fn fence_accepts_newer_tokens_and_rejects_stale_ones(db: Db) {
    let (t, f, data) = (table("fl"), table("ff"), table("fdata"));
    let locker = Locker::connect(&db.with(&format!("table={t}")))
        .await
        .unwrap();
    let fence = Fence::open(&db.with(&format!("table={f}")), "counter")
        .await
        .unwrap();
    let raw = db.raw().await;
    raw.exec(&format!(
        "CREATE TABLE {data} (id INT PRIMARY KEY, n BIGINT NOT NULL, note TEXT)"
    ))
    .await;
    raw.exec(&format!("INSERT INTO {data} (id, n) VALUES (1, 0)"))
        .await;
    let bump = [Statement::new(format!(
        "UPDATE {data} SET n = n + {}, note = {} WHERE id = 1",
        db.p(1),
        db.p(2)
    ))
    .bind(SqlValue::Int(1))
    .bind(SqlValue::Null)];

    let old = locker.acquire("job", &opts(10_000)).await.unwrap();
    assert_eq!(fence.fenced_execute(&old, &bump).await.unwrap(), vec![1]);
    // The same holder writes again with the same token.
    assert_eq!(fence.fenced_execute(&old, &bump).await.unwrap(), vec![1]);
    let old_token = old.token();
    old.release().await.unwrap();
    let new = locker.acquire("job", &opts(10_000)).await.unwrap();
    assert_eq!(fence.fenced_execute(&new, &bump).await.unwrap(), vec![1]);
    let stale = fence.fenced_execute(old_token, &bump).await.unwrap_err();
    assert_eq!(stale.code(), ErrorCode::StaleToken, "{stale}");
    assert_eq!(
        fence.check(old_token).await.unwrap_err().code(),
        ErrorCode::StaleToken
    );
    fence.check(&new).await.unwrap();
    assert_eq!(fence.highest().await.unwrap(), Some(new.token()));
    // A failing statement rolls the whole write back, the token included.
    let broken = fence
        .fenced_execute(
            new.token() + 1,
            &[
                bump[0].clone(),
                Statement::new("INSERT INTO nowhere_at_all VALUES (1)"),
            ],
        )
        .await
        .unwrap_err();
    assert_eq!(broken.code(), ErrorCode::Backend, "{broken}");
    assert!(broken.message().contains("nothing was written"), "{broken}");
    assert_eq!(fence.highest().await.unwrap(), Some(new.token()));
    assert_eq!(
        raw.int(&format!("SELECT n FROM {data} WHERE id = 1")).await,
        Some(3)
    );
    // Text, bytes and floats bind too.
    let typed = Statement::new(format!(
        "UPDATE {data} SET note = {} WHERE id = {}",
        db.p(1),
        db.p(2)
    ))
    .bind(SqlValue::Text("it's \"quoted\"".into()))
    .bind(SqlValue::Int(1));
    assert_eq!(fence.fenced_execute(&new, &[typed]).await.unwrap(), vec![1]);
    // Tokens of another lock are refused.
    let other = locker.acquire("other-lock", &opts(10_000)).await.unwrap();
    let err = fence.fenced_execute(&other, &[]).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(err.message().contains("another lock"), "{err}");
    // A released lease is refused before anything is sent.
    new.release().await.unwrap();
    assert_eq!(
        fence.fenced_execute(&new, &bump).await.unwrap_err().code(),
        ErrorCode::NotHeld
    );
    other.release().await.unwrap();
    fence.close().await;
    locker.close().await;
    raw.drop_tables(&[&t, &format!("{t}_meta"), &f, &data])
        .await;
}

/// Two fenced writes that lock the same rows in opposite orders deadlock; the database rolls
/// one back (PostgreSQL 40P01, MariaDB 1213) and fencelock runs it again.
async fn a_deadlocked_fenced_write_is_run_again(db: Db) {
    let (f, data) = (table("dlf"), table("dld"));
    let raw = db.raw().await;
    raw.exec(&format!(
        "CREATE TABLE {data} (id INT PRIMARY KEY, n BIGINT NOT NULL)"
    ))
    .await;
    raw.exec(&format!("INSERT INTO {data} (id, n) VALUES (1, 0), (2, 0)"))
        .await;
    let url = db.with(&format!("table={f}"));
    let (a, b) = (
        Fence::open(&url, "a").await.unwrap(),
        Fence::open(&url, "b").await.unwrap(),
    );
    let pause = match db.kind {
        Kind::Postgres => "SELECT pg_sleep(0.5)",
        Kind::MariaDb => "SELECT SLEEP(0.5)",
    };
    let bump = |id: i64| Statement::new(format!("UPDATE {data} SET n = n + 1 WHERE id = {id}"));
    let one_then_two = [bump(1), Statement::new(pause), bump(2)];
    let two_then_one = [bump(2), Statement::new(pause), bump(1)];
    let (ra, rb) = tokio::join!(
        a.fenced_execute(7u64, &one_then_two),
        b.fenced_execute(7u64, &two_then_one)
    );
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!((ra[0], ra[2], rb[0], rb[2]), (1, 1, 1, 1));
    assert_eq!(
        raw.int(&format!("SELECT n FROM {data} WHERE id = 1")).await,
        Some(2)
    );
    assert_eq!(
        raw.int(&format!("SELECT n FROM {data} WHERE id = 2")).await,
        Some(2)
    );
    a.close().await;
    b.close().await;
    raw.drop_tables(&[&f, &data]).await;
}

async fn least_privilege_role_with_create_table_false(db: Db) {
    let (t, f) = (table("lp"), table("lpf"));
    // The owner makes the tables.
    let owner = Locker::connect(&db.with(&format!("table={t}")))
        .await
        .unwrap();
    let owner_fence = Fence::open(&db.with(&format!("table={f}")), "res")
        .await
        .unwrap();
    owner.close().await;
    owner_fence.close().await;

    let app_url = support::sql::with(&db.app_url, &format!("table={t}&create_table=false"));
    let app = Locker::connect(&app_url).await.unwrap();
    let lease = app.acquire("job", &opts(10_000)).await.unwrap();
    lease.extend(None).await.unwrap();
    assert!(app.inspect("job").await.unwrap().held);
    let fence = Fence::open(
        &support::sql::with(&db.app_url, &format!("table={f}&create_table=false")),
        "res",
    )
    .await
    .unwrap();
    fence.fenced_execute(&lease, &[]).await.unwrap();
    lease.release().await.unwrap();
    // The default (create_table=true) also works when the tables exist: nothing is created.
    let default = Locker::connect(&support::sql::with(&db.app_url, &format!("table={t}")))
        .await
        .unwrap();
    default
        .acquire("job", &opts(10_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    default.close().await;

    // A missing table is named.
    let absent = table("absent");
    let err = Locker::connect(&support::sql::with(
        &db.app_url,
        &format!("table={absent}&create_table=false"),
    ))
    .await
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Backend, "{err}");
    assert!(
        err.message().contains(&absent) && err.message().contains("does not exist"),
        "{err}"
    );
    let err = Fence::open(
        &support::sql::with(&db.app_url, &format!("table={absent}&create_table=false")),
        "res",
    )
    .await
    .unwrap_err();
    assert!(
        err.message().contains(&absent) && err.message().contains("does not exist"),
        "{err}"
    );
    // Asked to create it without the right to: AUTH, naming the table and the way out.
    let err = Locker::connect(&support::sql::with(&db.app_url, &format!("table={absent}")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Auth, "{err}");
    assert!(
        err.message().contains(&absent) && err.message().contains("create_table=false"),
        "{err}"
    );
    assert!(!err.message().contains("fencelock-app"), "{err}");
    app.close().await;
    fence.close().await;
    db.raw()
        .await
        .drop_tables(&[&t, &format!("{t}_meta"), &f])
        .await;
}

/// The worker half of the concurrent-first-use test: runs when re-executed with
/// FENCELOCK_SQL_FIRST_USE set, and does nothing in a normal test run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_use_worker() {
    let Ok(spec) = std::env::var("FENCELOCK_SQL_FIRST_USE") else {
        return;
    };
    let (url, start_at) = spec.rsplit_once('|').unwrap();
    let start_at: u128 = start_at.parse().unwrap();
    let now = now_ms();
    if start_at > now {
        tokio::time::sleep(Duration::from_millis((start_at - now) as u64)).await;
    }
    let locker = Locker::connect(url).await.unwrap();
    let lease = locker.acquire("first", &opts(10_000)).await.unwrap();
    let deployment = lease.fence_token().lock.unwrap().deployment;
    lease.release().await.unwrap();
    locker.close().await;
    println!("DEPLOYMENT {deployment}");
}

fn reexec(test: &str, env: &str, spec: &str) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env(env, spec)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn output_line(child: std::process::Child, prefix: &str) -> String {
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "a worker failed:\n{text}");
    text.lines()
        .find_map(|l| {
            l.find(prefix)
                .map(|at| l[at + prefix.len()..].trim().to_string())
        })
        .unwrap_or_else(|| panic!("the worker printed no {prefix}:\n{text}"))
}

async fn concurrent_first_uses_create_the_table_once(db: Db) {
    let t = table("first");
    let spec = format!("{}|{}", db.with(&format!("table={t}")), now_ms() + 1500);
    let workers: Vec<_> = (0..8)
        .map(|_| {
            reexec(
                &test_path(module_path!(), "first_use_worker"),
                "FENCELOCK_SQL_FIRST_USE",
                &spec,
            )
        })
        .collect();
    let deployments: HashSet<String> = tokio::task::spawn_blocking(move || {
        workers
            .into_iter()
            .map(|w| output_line(w, "DEPLOYMENT "))
            .collect()
    })
    .await
    .unwrap();
    assert_eq!(
        deployments.len(),
        1,
        "the processes saw different tables: {deployments:?}"
    );
    let raw = db.raw().await;
    assert_eq!(
        raw.int(&format!("SELECT count(*) FROM {t}_meta")).await,
        Some(2)
    );
    raw.drop_tables(&[&t, &format!("{t}_meta")]).await;
}

/// The worker half of the two-process contention test (FENCELOCK_SQL_CONTENTION set).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_worker() {
    let Ok(spec) = std::env::var("FENCELOCK_SQL_CONTENTION") else {
        return;
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let db = support::sql::by_name(parts[0]);
    let (t, f, counter, log) = (
        parts[1].to_string(),
        parts[2].to_string(),
        parts[3].to_string(),
        parts[4].to_string(),
    );
    let (tasks, rounds): (usize, usize) = (parts[5].parse().unwrap(), parts[6].parse().unwrap());
    // MariaDB waiters poll: a short interval keeps 1600 hand-overs quick. PostgreSQL's are
    // woken by NOTIFY.
    let poll = if db.kind == Kind::MariaDb { 10 } else { 50 };
    let options = LockerOptions::default().with_poll_interval(Duration::from_millis(poll));
    let locker = Locker::connect_with(&db.with(&format!("table={t}")), options)
        .await
        .unwrap();
    let fence = Fence::open(&db.with(&format!("table={f}")), "counter")
        .await
        .unwrap();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (locker, fence, db, counter, log) = (
            locker.clone(),
            fence.clone(),
            db.clone(),
            counter.clone(),
            log.clone(),
        );
        handles.push(tokio::spawn(async move {
            let raw = db.raw().await;
            let mut tokens = Vec::new();
            for _ in 0..rounds {
                let lease = locker.acquire("shared", &opts(10_000)).await.unwrap();
                let n = raw
                    .int(&format!("SELECT n FROM {counter} WHERE id = 1"))
                    .await
                    .unwrap();
                let write = [
                    Statement::new(format!("UPDATE {counter} SET n = {} WHERE id = 1", db.p(1)))
                        .bind(SqlValue::Int(n + 1)),
                    Statement::new(format!(
                        "INSERT INTO {log} (seq, token) VALUES ({}, {})",
                        db.p(1),
                        db.p(2)
                    ))
                    .bind(SqlValue::Int(n + 1))
                    .bind(SqlValue::Int(lease.token() as i64)),
                ];
                // Every holder here holds the lock: a refusal would be a bug, and a stale
                // write accepted would show in the counter and the log.
                fence.fenced_execute(&lease, &write).await.unwrap();
                tokens.push(lease.token());
                lease.release().await.unwrap();
            }
            raw.close().await;
            tokens
        }));
    }
    let mut lines = Vec::new();
    for h in handles {
        let tokens = h.await.unwrap();
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "one task's tokens went backwards"
        );
        lines.push(
            tokens
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(","),
        );
    }
    locker.close().await;
    fence.close().await;
    println!("TOKENS {}", lines.join(","));
}

async fn eight_contenders_in_two_processes_keep_a_fenced_counter_exact(db: Db) {
    let (t, f, counter, log) = (table("ct"), table("cf"), table("cn"), table("cl"));
    let raw = db.raw().await;
    raw.exec(&format!(
        "CREATE TABLE {counter} (id INT PRIMARY KEY, n BIGINT NOT NULL)"
    ))
    .await;
    raw.exec(&format!("INSERT INTO {counter} (id, n) VALUES (1, 0)"))
        .await;
    raw.exec(&format!(
        "CREATE TABLE {log} (seq BIGINT PRIMARY KEY, token BIGINT NOT NULL)"
    ))
    .await;
    let spec = format!("{}|{t}|{f}|{counter}|{log}|4|200", db.name());
    let workers: Vec<_> = (0..2)
        .map(|_| {
            reexec(
                &test_path(module_path!(), "contention_worker"),
                "FENCELOCK_SQL_CONTENTION",
                &spec,
            )
        })
        .collect();
    let tokens: Vec<u64> = tokio::task::spawn_blocking(move || {
        workers
            .into_iter()
            .flat_map(|w| {
                output_line(w, "TOKENS ")
                    .split(',')
                    .map(|t| t.parse::<u64>().unwrap())
                    .collect::<Vec<_>>()
            })
            .collect()
    })
    .await
    .unwrap();
    assert_eq!(tokens.len(), 1600);
    assert_eq!(
        tokens.iter().collect::<HashSet<_>>().len(),
        1600,
        "a token was handed out twice"
    );
    assert_eq!(
        raw.int(&format!("SELECT n FROM {counter} WHERE id = 1"))
            .await,
        Some(1600),
        "lost updates"
    );
    let logged = raw
        .pairs(&format!("SELECT seq, token FROM {log} ORDER BY seq"))
        .await;
    assert_eq!(logged.len(), 1600);
    assert!(
        logged
            .iter()
            .enumerate()
            .all(|(i, (seq, _))| *seq == i as i64 + 1)
    );
    assert!(
        logged.windows(2).all(|w| w[0].1 < w[1].1),
        "tokens were not strictly increasing in write order"
    );
    raw.drop_tables(&[&t, &format!("{t}_meta"), &f, &counter, &log])
        .await;
}

async fn bad_credentials_and_options_get_typed_errors_without_secrets(db: Db) {
    let wrong = db.url.replacen("fencelock-test@", "hunter2-wrong@", 1);
    assert_ne!(wrong, db.url);
    let err = Locker::connect(&wrong).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Auth, "{err}");
    assert!(!format!("{err} {err:?}").contains("hunter2"), "{err}");
    // The driver's own error is kept as the cause: SQLSTATE 28P01, or MySQL's error 1045.
    let cause = err.cause().expect("the driver's error as the cause");
    let expected = if db.url.starts_with("postgres") {
        ("postgres", "28P01")
    } else {
        ("mysql", "1045")
    };
    assert_eq!((cause.driver(), cause.code()), expected, "{err:?}");
    assert!(!cause.to_string().contains("hunter2"), "{cause}");
    for (query, words) in [
        ("tabel=x", "unknown"),
        ("table=x;y", "table name"),
        ("pool_size=0", "pool_size"),
    ] {
        let err = Locker::connect(&db.with(query)).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{query}: {err}");
        assert!(err.message().contains(words), "{err}");
        assert!(!err.message().contains("fencelock-test"), "{err}");
    }
    // TLS options are honored: the test servers speak plain TCP.
    let (no_tls, must_tls) = match db.kind {
        Kind::Postgres => ("sslmode=disable", "sslmode=require"),
        Kind::MariaDb => ("ssl-mode=DISABLED", "ssl-mode=REQUIRED"),
    };
    let t = table("tls");
    let plain = Locker::connect(&db.with(&format!("{no_tls}&table={t}")))
        .await
        .unwrap();
    plain.close().await;
    match Locker::connect(&db.with(&format!("{must_tls}&table={t}"))).await {
        Err(err) => {
            assert_ne!(err.code(), ErrorCode::Internal, "{err}");
            assert!(!err.message().contains("fencelock-test"), "{err}");
        }
        // A server with TLS configured accepts it.
        Ok(locker) => locker.close().await,
    }
    let err = Locker::connect(&db.with("sslmode=sometimes&ssl-mode=maybe"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    let err = Locker::connect(&format!("{}://127.0.0.1:1/db", db.name()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Unavailable, "{err}");
    db.raw()
        .await
        .drop_tables(&[&t, &format!("{t}_meta")])
        .await;
}

/// Waiters on PostgreSQL are woken by NOTIFY.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_waiters_are_woken_by_notify() {
    let db = support::sql::postgres();
    let t = table("notify");
    support::probe::a_release_wakes_a_slow_polling_waiter(&db.with(&format!("table={t}"))).await;
    db.raw()
        .await
        .drop_tables(&[&t, &format!("{t}_meta")])
        .await;
}

/// Forces each interleaving of a release with a PostgreSQL waiter's failed attempt, its LISTEN
/// and its sleep: the waiter must never miss it (the fallback poll is a minute here).
/// Multi-threaded: the hook blocks one worker while the release runs on another thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_waiters_never_miss_a_release_around_their_subscription() {
    let db = support::sql::postgres();
    let t = table("around");
    let url = db.with(&format!("table={t}"));
    for point in ["attempt_failed", "subscribed", "waiting"] {
        let holder = Locker::connect(&url).await.unwrap();
        let name = unique(point);
        let lease = holder.acquire(&name, &opts(30_000)).await.unwrap();
        let fired = Arc::new(AtomicBool::new(false));
        let hook = {
            let fired = fired.clone();
            let lease = std::sync::Mutex::new(Some(lease.clone()));
            TestHook(Arc::new(move |at: &'static str| {
                if at == point && !fired.swap(true, Ordering::SeqCst) {
                    let lease = lease.lock().unwrap().take().unwrap();
                    // Release synchronously, on another thread, right at this point.
                    std::thread::spawn(move || {
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .unwrap();
                        rt.block_on(lease.release()).unwrap();
                    })
                    .join()
                    .unwrap();
                }
            }))
        };
        let mut options = LockerOptions::default().with_poll_interval(Duration::from_secs(60));
        options.test_hook = Some(hook);
        let waiter = Locker::connect_with(&url, options).await.unwrap();
        let got = waiter
            .acquire(
                &name,
                &opts(30_000).with_wait(Some(Duration::from_secs(10))),
            )
            .await;
        assert!(
            fired.load(Ordering::SeqCst),
            "the hook point {point} was never reached"
        );
        let got = got.unwrap_or_else(|e| panic!("missed a release at {point}: {e}"));
        assert!(got.token() > lease.token());
        got.release().await.unwrap();
        waiter.close().await;
    }
    db.raw()
        .await
        .drop_tables(&[&t, &format!("{t}_meta")])
        .await;
}
