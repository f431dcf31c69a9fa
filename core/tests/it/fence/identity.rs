//! A fence's lock identity: the same lock however its URL is spelled (Redlock masters as a
//! set), a `deployment=NAME` option for aliases the spelling cannot tell (an IP and its name),
//! and fence records written under an earlier identity keep working (and move to the new one).

use crate::support::redlock::{masters, servers_up};
use crate::support::{self, redis_url, unique};
use fencelock::{ErrorCode, Fence, LockOptions, Locker, Statement};

fn sqlite_fence_url(tag: &str) -> String {
    let dir = std::env::temp_dir().join(format!("fencelock-fence-identity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    format!("sqlite://{}", dir.join(format!("{tag}.db")).display())
}

/// `host:port` of each Redlock master, in the order of the test URL.
fn master_hosts() -> Vec<String> {
    masters()
        .iter()
        .map(|m| m.trim_start_matches("redis://").to_string())
        .collect()
}

async fn write(fence: &Fence, lease: &fencelock::Lease) -> fencelock::Result<Vec<u64>> {
    fence
        .fenced_execute(
            lease,
            &[Statement::new("CREATE TABLE IF NOT EXISTS t (x INTEGER)")],
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_masters_listed_in_another_order_are_the_same_lock() {
    if !servers_up() {
        return;
    }
    let hosts = master_hosts();
    let mut reversed = hosts.clone();
    reversed.reverse();
    let (a, b) = (
        Locker::connect(&format!("redlock://{}", hosts.join(",")))
            .await
            .unwrap(),
        Locker::connect(&format!("redlock://{}", reversed.join(",")))
            .await
            .unwrap(),
    );
    let name = unique("fence-order");
    let fence = Fence::open(&sqlite_fence_url("order"), &name)
        .await
        .unwrap();
    let first = a.acquire(&name, &LockOptions::default()).await.unwrap();
    write(&fence, &first).await.unwrap();
    first.release().await.unwrap();
    let second = b.acquire(&name, &LockOptions::default()).await.unwrap();
    write(&fence, &second).await.unwrap();
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_record_under_the_listed_order_is_accepted_and_moves_to_the_set() {
    if !servers_up() {
        return;
    }
    let mut hosts = master_hosts();
    hosts.sort();
    hosts.reverse();
    let listed = format!("redlock://{}", hosts.join(","));
    let locker = Locker::connect(&listed).await.unwrap();
    let name = unique("fence-legacy");
    let url = sqlite_fence_url("legacy");
    let fence = Fence::open(&url, &name).await.unwrap();
    // What earlier versions recorded: the masters in the listed order.
    let legacy = format!(
        "redlock:{}/fencelock/{}",
        hosts.join(","),
        fencelock::internals::encode_name(&name)
    );
    let lease = locker
        .acquire(&name, &LockOptions::default())
        .await
        .unwrap();
    write(&fence, &lease).await.unwrap();
    let path = url.trim_start_matches("sqlite://").to_string();
    let db = sqlx_sqlite(&path).await;
    let updated = sqlx::query("UPDATE fencelock_fences SET lock_key = ? WHERE resource = ?")
        .bind(&legacy)
        .bind(name.as_bytes())
        .execute(&db)
        .await
        .unwrap();
    assert_eq!(updated.rows_affected(), 1);
    write(&fence, &lease).await.unwrap();
    // The resource column holds the name's bytes.
    let stored: String =
        sqlx::query_scalar("SELECT lock_key FROM fencelock_fences WHERE resource = ?")
            .bind(name.as_bytes())
            .fetch_one(&db)
            .await
            .unwrap();
    assert_ne!(stored, legacy, "the record stayed under the listed order");
    hosts.sort();
    assert!(
        stored.starts_with(&format!("redlock:{}/", hosts.join(","))),
        "{stored}"
    );
    lease.release().await.unwrap();
}

async fn sqlx_sqlite(path: &str) -> sqlx::SqlitePool {
    sqlx::SqlitePool::connect(&format!("sqlite://{path}"))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_name_makes_two_spellings_one_lock() {
    let by_ip = redis_url();
    let by_name = by_ip.replace("127.0.0.1", "localhost");
    assert_ne!(by_ip, by_name, "the test URL names 127.0.0.1");
    let name = unique("fence-alias");
    let fence = Fence::open(&sqlite_fence_url("alias"), &name)
        .await
        .unwrap();
    let plain = Locker::connect(&by_ip).await.unwrap();
    let lease = plain.acquire(&name, &LockOptions::default()).await.unwrap();
    write(&fence, &lease).await.unwrap();
    lease.release().await.unwrap();
    // Another spelling, no name: another lock as far as the fence can tell.
    let other = Locker::connect(&by_name).await.unwrap();
    let lease = other.acquire(&name, &LockOptions::default()).await.unwrap();
    let err = write(&fence, &lease).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    lease.release().await.unwrap();
    // Named: the record made under the derived identity is accepted and moves to the name;
    // from then on every spelling with that name is the same lock.
    let sep = |u: &str| if u.contains('?') { '&' } else { '?' };
    for url in [&by_ip, &by_name, &by_ip] {
        let named = Locker::connect(&format!("{url}{}deployment=main-redis", sep(url)))
            .await
            .unwrap();
        let lease = named.acquire(&name, &LockOptions::default()).await.unwrap();
        write(&fence, &lease).await.unwrap();
        lease.release().await.unwrap();
    }
    for bad in ["", "has space", "a/b"] {
        let err = Locker::connect(&format!("{by_ip}{}deployment={bad}", sep(&by_ip)))
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{bad:?}: {err}");
    }
}

#[tokio::test]
async fn a_fence_on_redlock_says_where_it_lives() {
    let err = Fence::open(
        "redlock://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003",
        "r",
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(
        err.message().contains("where the resource's data lives"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_urls_spelled_differently_name_one_lock() {
    let plain = redis_url();
    let with_db = format!(
        "{}/0",
        plain.split('?').next().unwrap().trim_end_matches('/')
    );
    let name = unique("fence-redis-spelling");
    let fence = Fence::open(&plain, &name).await.unwrap();
    for url in [&plain, &with_db, &plain] {
        let locker = Locker::connect(url).await.unwrap();
        let lease = locker
            .acquire(&name, &LockOptions::default())
            .await
            .unwrap();
        fence
            .fenced_set(&lease, &format!("data:{name}"), b"x")
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        lease.release().await.unwrap();
    }
    // A record under the spelling earlier versions used (the database as written: none) is
    // the same lock, and moves to the current identity.
    let mut raw = support::raw_redis(&plain).await;
    let record = format!(
        "fencelock-fence:{{{}}}",
        fencelock::internals::encode_name(&name)
    );
    let current: String = redis::cmd("HGET")
        .arg(&record)
        .arg("lock")
        .query_async(&mut raw)
        .await
        .unwrap();
    let host = with_db
        .trim_start_matches("redis://")
        .trim_end_matches("/0");
    let legacy = format!(
        "redis:{host}//fencelock/{}",
        fencelock::internals::encode_name(&name)
    );
    assert_ne!(current, legacy);
    let _: () = redis::cmd("HSET")
        .arg(&record)
        .arg("lock")
        .arg(&legacy)
        .query_async(&mut raw)
        .await
        .unwrap();
    let locker = Locker::connect(&plain).await.unwrap();
    let lease = locker
        .acquire(&name, &LockOptions::default())
        .await
        .unwrap();
    fence.check(&lease).await.unwrap();
    fence
        .fenced_set(&lease, &format!("data:{name}"), b"y")
        .await
        .unwrap();
    let moved: String = redis::cmd("HGET")
        .arg(&record)
        .arg("lock")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(moved, current);
    lease.release().await.unwrap();
}
