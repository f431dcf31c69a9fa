//! What is specific to SQLite: its lease table (a deleted row, names stored as data), its fence's
//! transaction, its URL's inputs and the blocking form. The lock contract itself runs on SQLite
//! with every other backend in the conformance suite (core/tests/it/conformance).

use std::time::Duration;

use fencelock::{ErrorCode, Fence, LockOptions, Locker, SqlValue, Statement};

fn db_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}", dir.path().join("locks.db").display())
}

fn opts(ttl_ms: u64) -> LockOptions {
    LockOptions::default().with_ttl(Duration::from_millis(ttl_ms))
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

/// What is specific to the SQLite fence: the fenced write runs in one transaction with the
/// token's record, so a failing statement rolls both back. (Stale, foreign, released and lost
/// tokens are refused on every backend: the conformance suite's fence.rs.)
#[tokio::test]
async fn a_failing_fenced_write_rolls_back_the_token_too() {
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
    let lease = locker.acquire("job", &opts(10_000)).await.unwrap();
    assert_eq!(fence.fenced_execute(&lease, &bump).await.unwrap(), vec![1]);
    let broken = fence
        .fenced_execute(
            lease.token() + 1,
            &[
                bump[0].clone(),
                Statement::new("INSERT INTO nowhere VALUES (1)"),
            ],
        )
        .await;
    assert_eq!(broken.unwrap_err().code(), ErrorCode::Backend);
    assert_eq!(fence.highest().await.unwrap(), Some(lease.token()));
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT n FROM counter")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 1);
    lease.release().await.unwrap();
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
    // SQLite's result code 8 (SQLITE_READONLY) is kept as the error's cause.
    let ro = Locker::connect(&format!("{url}?mode=ro")).await;
    let err = match ro {
        Ok(ro) => {
            let err = ro.acquire("job", &opts(1000)).await.unwrap_err();
            assert_eq!(err.code(), ErrorCode::Backend, "{err}");
            err
        }
        Err(err) => err,
    };
    assert!(err.message().contains("read-only"), "{err}");
    let cause = err.cause().expect("the driver's error as the cause");
    assert_eq!((cause.driver(), cause.code()), ("sqlite", "8"), "{err:?}");
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
