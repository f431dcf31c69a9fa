//! The lock model on the SQLite lease table, end to end through the public API.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock::{ErrorCode, Fence, LockOptions, Locker, LockerOptions, SqlValue, Statement};

fn db_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}", dir.path().join("locks.db").display())
}

fn opts(ttl_ms: u64) -> LockOptions {
    LockOptions::default().with_ttl(Duration::from_millis(ttl_ms))
}

/// Takes a lock over behind its holder's back, as an operator (or a bug) would.
async fn take_over_by_hand(url: &str, name: &str) {
    let path = url.trim_start_matches("sqlite://");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{path}"))
        .await
        .unwrap();
    sqlx::query("UPDATE fencelock_locks SET owner = x'00000000000000000000000000000000', token = token + 1 WHERE name = ?1")
        .bind(name.as_bytes())
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
}

#[tokio::test]
async fn acquire_release_and_tokens_increase() {
    let dir = tempfile::tempdir().unwrap();
    let locker = Locker::connect(&db_url(&dir)).await.unwrap();
    let mut last = 0;
    for _ in 0..5 {
        let lease = locker.acquire("job", &opts(10_000)).await.unwrap();
        assert!(lease.token() > last, "{} <= {last}", lease.token());
        assert!(lease.token() < 1 << 63);
        last = lease.token();
        assert!(lease.is_held());
        assert!(!lease.is_lost());
        let info = locker.inspect("job").await.unwrap();
        assert!(info.held);
        assert_eq!(info.token, Some(lease.token()));
        assert!(info.holder.unwrap().contains("\"pid\""));
        lease.release().await.unwrap();
        assert!(!locker.inspect("job").await.unwrap().held);
    }
}

#[tokio::test]
async fn a_held_lock_is_not_granted_twice() {
    let dir = tempfile::tempdir().unwrap();
    let a = Locker::connect(&db_url(&dir)).await.unwrap();
    let b = Locker::connect(&db_url(&dir)).await.unwrap();
    let lease = a.acquire("job", &opts(10_000)).await.unwrap();
    assert!(b.try_acquire("job", &opts(10_000)).await.unwrap().is_none());
    let started = Instant::now();
    let err = b
        .acquire(
            "job",
            &opts(10_000).with_wait(Some(Duration::from_millis(300))),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Timeout);
    assert!(err.message().contains("job"), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    // Released while b waits: b gets it, with a larger token.
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire("job", &opts(10_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    lease.release().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(next.token() > lease.token());
}

#[tokio::test]
async fn release_twice_is_not_held_and_extend_after_release_too() {
    let dir = tempfile::tempdir().unwrap();
    let locker = Locker::connect(&db_url(&dir)).await.unwrap();
    let lease = locker.acquire("job", &opts(10_000)).await.unwrap();
    lease.extend(Some(Duration::from_secs(20))).await.unwrap();
    lease.release().await.unwrap();
    assert_eq!(
        lease.release().await.unwrap_err().code(),
        ErrorCode::NotHeld
    );
    assert_eq!(
        lease.extend(None).await.unwrap_err().code(),
        ErrorCode::NotHeld
    );
    assert!(!lease.is_held());
    assert!(!lease.is_lost());
}

#[tokio::test]
async fn a_lease_taken_over_by_hand_fires_its_lost_signal_within_one_renewal_interval() {
    let dir = tempfile::tempdir().unwrap();
    let url = db_url(&dir);
    let locker = Locker::connect(&url).await.unwrap();
    let ttl = Duration::from_millis(1500);
    let lease = locker
        .acquire("job", &LockOptions::default().with_ttl(ttl))
        .await
        .unwrap();
    let signal = lease.lost_signal();
    take_over_by_hand(&url, "job").await;
    let started = Instant::now();
    let reason = tokio::time::timeout(ttl / 3 + Duration::from_secs(2), signal.wait())
        .await
        .expect("lost signal");
    assert_eq!(reason, fencelock::LossReason::TakenOver);
    assert!(started.elapsed() < ttl / 3 + Duration::from_secs(2));
    assert!(lease.is_lost());
    assert_eq!(lease.release().await.unwrap_err().code(), ErrorCode::Lost);
    assert_eq!(
        lease.extend(None).await.unwrap_err().code(),
        ErrorCode::Lost
    );
}

#[tokio::test]
async fn without_renewal_the_lease_is_lost_at_its_client_deadline_and_the_lock_frees() {
    let dir = tempfile::tempdir().unwrap();
    let locker = Locker::connect(&db_url(&dir)).await.unwrap();
    let ttl = Duration::from_millis(800);
    let lease = locker
        .acquire("job", &opts(800).with_auto_renew(false))
        .await
        .unwrap();
    let signal = lease.lost_signal();
    // The watchdog thread fires the signal without anybody reading the lease.
    assert!(signal.wait_blocking(Some(ttl + Duration::from_secs(2))));
    assert_eq!(signal.reason(), Some(fencelock::LossReason::Expired));
    // The client deadline is before the server's expiry (1% + 2 ms margin).
    let next = locker
        .acquire("job", &opts(10_000).with_wait(Some(Duration::from_secs(5))))
        .await
        .unwrap();
    assert!(next.token() > lease.token());
    assert_eq!(lease.release().await.unwrap_err().code(), ErrorCode::Lost);
}

#[tokio::test]
async fn auto_renew_keeps_a_short_lease_alive() {
    let dir = tempfile::tempdir().unwrap();
    let locker = Locker::connect(&db_url(&dir)).await.unwrap();
    let lease = locker.acquire("job", &opts(600)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(lease.is_held(), "renewals should have kept it");
    let other = Locker::connect(&db_url(&dir)).await.unwrap();
    assert!(
        other
            .try_acquire("job", &opts(600))
            .await
            .unwrap()
            .is_none()
    );
    lease.release().await.unwrap();
}

#[tokio::test]
async fn max_hold_stops_renewals() {
    let dir = tempfile::tempdir().unwrap();
    let locker = Locker::connect(&db_url(&dir)).await.unwrap();
    let lease = locker
        .acquire(
            "job",
            &opts(600).with_max_hold(Some(Duration::from_millis(700))),
        )
        .await
        .unwrap();
    assert!(
        lease
            .lost_signal()
            .wait_blocking(Some(Duration::from_secs(5)))
    );
}

#[tokio::test]
async fn deleting_a_free_row_does_not_make_tokens_go_backwards() {
    let dir = tempfile::tempdir().unwrap();
    let url = db_url(&dir);
    let locker = Locker::connect(&url).await.unwrap();
    let first = locker.acquire("job", &opts(10_000)).await.unwrap();
    first.release().await.unwrap();
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query("DELETE FROM fencelock_locks")
        .execute(&pool)
        .await
        .unwrap();
    let second = locker.acquire("job", &opts(10_000)).await.unwrap();
    assert!(second.token() > first.token());
}

#[tokio::test]
async fn dropping_a_lease_releases_it_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let locker = Locker::connect(&db_url(&dir)).await.unwrap();
    drop(locker.acquire("job", &opts(10_000)).await.unwrap());
    let again = locker
        .acquire("job", &opts(10_000).with_wait(Some(Duration::from_secs(5))))
        .await;
    assert!(again.is_ok(), "{again:?}");
}

#[tokio::test]
async fn close_releases_what_the_locker_holds() {
    let dir = tempfile::tempdir().unwrap();
    let a = Locker::connect(&db_url(&dir)).await.unwrap();
    let b = Locker::connect(&db_url(&dir)).await.unwrap();
    let lease = a.acquire("job", &opts(10_000)).await.unwrap();
    a.close().await;
    assert!(b.try_acquire("job", &opts(10_000)).await.unwrap().is_some());
    assert_eq!(
        a.acquire("x", &opts(10_000)).await.unwrap_err().code(),
        ErrorCode::Closed
    );
    assert_eq!(
        lease.release().await.unwrap_err().code(),
        ErrorCode::NotHeld
    );
}

#[tokio::test]
async fn a_cancelled_acquire_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let locker = Locker::connect(&db_url(&dir)).await.unwrap();
    let holder = locker.acquire("job", &opts(10_000)).await.unwrap();
    let waiting = tokio::time::timeout(
        Duration::from_millis(200),
        locker.acquire("job", &opts(10_000)),
    )
    .await;
    assert!(waiting.is_err(), "the wait should have been cancelled");
    holder.release().await.unwrap();
    assert!(!locker.inspect("job").await.unwrap().held);
}

#[tokio::test]
async fn contention_in_one_process_is_exclusive_with_increasing_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let url = db_url(&dir);
    let inside = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let locker = Locker::connect_with(
            &url,
            LockerOptions::default().with_poll_interval(Duration::from_millis(5)),
        )
        .await
        .unwrap();
        let inside = inside.clone();
        let tokens = tokens.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                let lease = locker.acquire("shared", &opts(10_000)).await.unwrap();
                assert_eq!(
                    inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
                    0,
                    "task {i} overlapped"
                );
                tokens.lock().unwrap().push(lease.token());
                tokio::task::yield_now().await;
                inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                lease.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), 80);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not strictly increasing"
    );
}

#[tokio::test]
async fn fence_accepts_newer_tokens_and_rejects_stale_ones() {
    let dir = tempfile::tempdir().unwrap();
    let url = db_url(&dir);
    let locker = Locker::connect(&url).await.unwrap();
    let fence = Fence::open(&url, "counter").await.unwrap();
    let setup = Fence::open(&url, "setup").await.unwrap();
    setup
        .fenced_execute(
            1u64,
            &[
                Statement::new("CREATE TABLE counter (n INTEGER)"),
                Statement::new("INSERT INTO counter VALUES (0)"),
            ],
        )
        .await
        .unwrap();
    let bump = [Statement::new("UPDATE counter SET n = n + ?1").bind(SqlValue::Int(1))];

    let old = locker.acquire("job", &opts(10_000)).await.unwrap();
    fence.fenced_execute(&old, &bump).await.unwrap();
    let old_token = old.token();
    old.release().await.unwrap();
    let new = locker.acquire("job", &opts(10_000)).await.unwrap();
    assert_eq!(fence.fenced_execute(&new, &bump).await.unwrap(), vec![1]);
    // The old holder's token is refused, and nothing of its write lands.
    let stale = fence.fenced_execute(old_token, &bump).await.unwrap_err();
    assert_eq!(stale.code(), ErrorCode::StaleToken);
    assert_eq!(
        fence.check(old_token).await.unwrap_err().code(),
        ErrorCode::StaleToken
    );
    fence.check(&new).await.unwrap();
    // A failing statement rolls the whole write back, the token included.
    let broken = fence
        .fenced_execute(
            new.token() + 1,
            &[
                bump[0].clone(),
                Statement::new("INSERT INTO nowhere VALUES (1)"),
            ],
        )
        .await;
    assert_eq!(broken.unwrap_err().code(), ErrorCode::Backend);
    assert_eq!(fence.highest().await.unwrap(), Some(new.token()));
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT n FROM counter")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 2);
    // A released lease is refused before anything is sent.
    new.release().await.unwrap();
    assert_eq!(
        fence.fenced_execute(&new, &bump).await.unwrap_err().code(),
        ErrorCode::NotHeld
    );
}

#[tokio::test]
async fn a_fence_refuses_tokens_of_another_lock() {
    let dir = tempfile::tempdir().unwrap();
    let url = db_url(&dir);
    let locker = Locker::connect(&url).await.unwrap();
    let fence = Fence::open(&url, "resource").await.unwrap();
    let a = locker.acquire("lock-a", &opts(10_000)).await.unwrap();
    fence.fenced_execute(&a, &[]).await.unwrap();
    let b = locker.acquire("lock-b", &opts(10_000)).await.unwrap();
    let err = fence.fenced_execute(&b, &[]).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(err.message().contains("another lock"), "{err}");
}

#[tokio::test]
async fn a_lost_lease_is_refused_by_a_fence_before_anything_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let url = db_url(&dir);
    let locker = Locker::connect(&url).await.unwrap();
    let fence = Fence::open(&url, "resource").await.unwrap();
    let lease = locker
        .acquire("job", &opts(300).with_auto_renew(false))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        fence.fenced_execute(&lease, &[]).await.unwrap_err().code(),
        ErrorCode::Lost
    );
    assert_eq!(fence.highest().await.unwrap(), None);
}

#[tokio::test]
async fn names_are_data() {
    let dir = tempfile::tempdir().unwrap();
    let locker = Locker::connect(&db_url(&dir)).await.unwrap();
    let names = [
        "'; DROP TABLE fencelock_locks; --",
        "Job",
        "job",
        "job ",
        &"é".repeat(127),
        "a\"b'c",
    ];
    let mut leases = Vec::new();
    for name in names {
        leases.push(
            locker
                .acquire(name, &opts(10_000).with_wait(Some(Duration::ZERO)))
                .await
                .unwrap(),
        );
    }
    for (lease, name) in leases.iter().zip(names) {
        assert_eq!(lease.name(), name);
        assert!(locker.inspect(name).await.unwrap().held);
    }
}

#[tokio::test]
async fn bad_inputs_get_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let url = db_url(&dir);
    let locker = Locker::connect(&url).await.unwrap();
    let long_name = "x".repeat(256);
    let cases: Vec<(&str, LockOptions, ErrorCode, &str)> = vec![
        ("", opts(1000), ErrorCode::InvalidArgument, "empty"),
        (
            &long_name,
            opts(1000),
            ErrorCode::InvalidArgument,
            "256 bytes",
        ),
        ("a\0b", opts(1000), ErrorCode::InvalidArgument, "NUL"),
        (
            "ok",
            LockOptions::default().with_ttl(Duration::ZERO),
            ErrorCode::InvalidArgument,
            "ttl",
        ),
        (
            "ok",
            LockOptions::default().with_ttl(Duration::from_secs(u64::MAX)),
            ErrorCode::InvalidArgument,
            "ttl",
        ),
        (
            "ok",
            opts(1000).with_wait(Some(Duration::from_secs(u64::MAX))),
            ErrorCode::InvalidArgument,
            "wait",
        ),
    ];
    for (name, options, code, words) in cases {
        let err = locker.acquire(name, &options).await.unwrap_err();
        assert_eq!(err.code(), code, "{name:?}: {err}");
        assert!(err.message().contains(words), "{err}");
    }

    let missing = format!("sqlite://{}/no/such/folder/locks.db", dir.path().display());
    let err = Locker::connect(&missing).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(err.message().contains("does not exist"), "{err}");

    let err = Locker::connect("postgres://bob:hunter2@127.0.0.1:1/db")
        .await
        .unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
    let err = Locker::connect("gopher://x").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    let err = Locker::connect("not a url").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);

    // A read-only database (mode=ro; file modes do not stop root) cannot take locks.
    let ro = Locker::connect(&format!("{url}?mode=ro")).await;
    match ro {
        Ok(ro) => {
            let err = ro.acquire("job", &opts(1000)).await.unwrap_err();
            assert_eq!(err.code(), ErrorCode::Backend, "{err}");
            assert!(err.message().contains("read-only"), "{err}");
        }
        Err(err) => assert!(err.message().contains("read-only"), "{err}"),
    }
    let err = Locker::connect(&format!("{url}?table=x;drop"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    let err = Locker::connect(&format!("{url}?create_table=false&table=absent"))
        .await
        .unwrap_err();
    assert!(err.message().contains("does not exist"), "{err}");
}

#[test]
fn the_blocking_form_works_without_a_runtime_on_this_thread() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let locker = runtime.block_on(Locker::connect(&db_url(&dir))).unwrap();
    let lease = locker.acquire_blocking("job", &opts(10_000)).unwrap();
    assert!(
        locker
            .try_acquire_blocking("job", &opts(10_000))
            .unwrap()
            .is_none()
    );
    lease.release_blocking(locker.runtime()).unwrap();
    // From inside the runtime it refuses instead of panicking.
    let err = runtime
        .block_on(async { locker.acquire_blocking("job", &opts(10_000)) })
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Internal);
}
