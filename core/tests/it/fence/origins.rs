//! A fence notices two servers answering for one lock (docs/design.md §3.7): a Redis lock's
//! tokens carry the origin mark of the data they were minted from, and a fence warns (a log
//! record and a `deployment_mismatch` event to the lease's Locker) when the mark changed while
//! the tokens did not continue above its highest. A server that lost the lock's data (a
//! restart without persistence, simulated here by deleting the lock's keys) writes a new mark
//! and its tokens continue above, through the time floor: no warning, not even for a holder
//! from before the loss whose token the fence refuses.
//!
//! "Two servers behind one address" is played by two Redis servers given one `deployment`
//! name, which is what `localhost` on two hosts looks like to a fence. Each scenario runs on
//! every kind of fence: SQLite, PostgreSQL, MariaDB and Redis.

use std::time::Duration;

use crate::support::{self, backend_url, raw_redis, redis_url, unique};
use fencelock::{
    ErrorCode, EventSubscription, Fence, Lease, LockEventKind, LockOptions, Locker, Statement,
};

/// A server of its own besides the main Redis: the first Redlock master.
fn second_redis_url() -> String {
    support::redlock::masters()[0].clone()
}

fn with_deployment(url: &str, name: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}deployment={name}")
}

/// Each kind of fence, by the URL it is opened on.
fn fence_urls() -> Vec<(&'static str, String)> {
    let dir = std::env::temp_dir().join(format!("fencelock-fence-origins-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    vec![
        (
            "sqlite",
            format!("sqlite://{}", dir.join("fences.db").display()),
        ),
        ("postgres", backend_url("postgres")),
        ("mariadb", backend_url("mariadb")),
        ("redis", redis_url()),
    ]
}

/// A fenced write with `lease`'s token, in the fence's own form.
async fn write(kind: &str, fence: &Fence, lease: &Lease) -> fencelock::Result<()> {
    if kind == "redis" {
        let key = format!("fence-origins-data:{}", fence.resource());
        fence.fenced_set(lease, &key, b"x").await
    } else {
        fence
            .fenced_execute(lease, &[Statement::new("SELECT 1")])
            .await
            .map(|_| ())
    }
}

/// The deployment warnings queued for `events` so far: a fence reports before its call
/// returns, so no waiting is needed.
fn warnings(events: &EventSubscription) -> Vec<String> {
    std::iter::from_fn(|| events.try_recv())
        .filter(|e| e.kind == LockEventKind::DeploymentMismatch)
        .map(|e| e.reason.unwrap_or_default())
        .collect()
}

fn opts() -> LockOptions {
    LockOptions::default().with_ttl(Duration::from_secs(30))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_behind_one_identity_are_reported_by_every_fence() {
    if !support::redlock::servers_up() {
        return;
    }
    let deployment = unique("shared");
    let here = Locker::connect(&with_deployment(&redis_url(), &deployment))
        .await
        .unwrap();
    let there = Locker::connect(&with_deployment(&second_redis_url(), &deployment))
        .await
        .unwrap();
    for (kind, url) in fence_urls() {
        let name = unique(&format!("two-servers-{kind}"));
        let fence = Fence::open(&url, &name).await.unwrap();
        let (here_events, there_events) = (here.subscribe(), there.subscribe());
        // Both servers grant the lock at once: they do not know of each other.
        let early = there.acquire(&name, &opts()).await.unwrap();
        let late = here.acquire(&name, &opts()).await.unwrap();
        assert!(
            late.token() > early.token(),
            "{kind}: the time floor orders them"
        );
        write(kind, &fence, &late).await.unwrap();
        let refused = write(kind, &fence, &early).await.unwrap_err();
        assert_eq!(refused.code(), ErrorCode::StaleToken, "{kind}: {refused}");
        let reported = warnings(&there_events);
        assert_eq!(reported.len(), 1, "{kind}: {reported:?}");
        assert!(
            reported[0].contains("two servers answer behind one address"),
            "{kind}: {}",
            reported[0]
        );
        assert_eq!(warnings(&here_events), Vec::<String>::new(), "{kind}");
        // The advisory check reports it too.
        assert_eq!(
            fence.check(&early).await.unwrap_err().code(),
            ErrorCode::StaleToken
        );
        assert_eq!(warnings(&there_events).len(), 1, "{kind}: check");
        early.release().await.unwrap();
        late.release().await.unwrap();
    }
}

/// Deletes the keys a Redis restart without persistence loses for one lock, or only its
/// origin mark (`only_origin`).
async fn lose_lock_data(name: &str, only_origin: bool) {
    let mut conn = raw_redis(&redis_url()).await;
    let base = format!("fencelock:{{{}}}", fencelock::internals::encode_name(name));
    let mut keys = vec![format!("{base}:origin")];
    if !only_origin {
        keys.extend([base.clone(), format!("{base}:fence")]);
    }
    let _: i64 = redis::cmd("DEL")
        .arg(&keys)
        .query_async(&mut conn)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_lost_the_locks_data_is_the_same_lock_without_a_warning() {
    let locker = Locker::connect(&redis_url()).await.unwrap();
    for (kind, url) in fence_urls() {
        let name = unique(&format!("lost-data-{kind}"));
        let fence = Fence::open(&url, &name).await.unwrap();
        let events = locker.subscribe();
        let before = locker.acquire(&name, &opts()).await.unwrap();
        write(kind, &fence, &before).await.unwrap();
        lose_lock_data(&name, false).await;
        // The restarted server grants the lock again, with a new mark and a larger token.
        let after = locker.acquire(&name, &opts()).await.unwrap();
        assert!(after.token() > before.token(), "{kind}");
        write(kind, &fence, &after).await.unwrap();
        // The holder from before the loss is refused by the token order, as any stale one.
        let refused = write(kind, &fence, &before).await.unwrap_err();
        assert_eq!(refused.code(), ErrorCode::StaleToken, "{kind}");
        assert_eq!(warnings(&events), Vec::<String>::new(), "{kind}");
        after.release().await.unwrap();
        // A missing mark alone is written again; the tokens continue, so still no warning.
        lose_lock_data(&name, true).await;
        let again = locker.acquire(&name, &opts()).await.unwrap();
        write(kind, &fence, &again).await.unwrap();
        assert_eq!(warnings(&events), Vec::<String>::new(), "{kind}");
        let mut conn = raw_redis(&redis_url()).await;
        let mark: Option<String> = redis::cmd("GET")
            .arg(format!(
                "fencelock:{{{}}}:origin",
                fencelock::internals::encode_name(&name)
            ))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(mark.map(|m| m.len()), Some(16), "{kind}: the mark is back");
        again.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_table_from_before_origins_gets_the_column() {
    let dir = std::env::temp_dir().join(format!(
        "fencelock-fence-origins-old-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("old.db");
    let url = format!("sqlite://{}", path.display());
    let old = sqlx::SqlitePool::connect(&format!("sqlite://{}?mode=rwc", path.display()))
        .await
        .unwrap();
    // The table as earlier versions made it, with a record in it.
    sqlx::query(
        "CREATE TABLE fencelock_fences (resource BLOB NOT NULL PRIMARY KEY, token INTEGER NOT NULL, \
         lock_key TEXT) WITHOUT ROWID",
    )
    .execute(&old)
    .await
    .unwrap();
    let name = unique("old-table");
    sqlx::query("INSERT INTO fencelock_fences (resource, token, lock_key) VALUES (?, 1, NULL)")
        .bind(name.as_bytes())
        .execute(&old)
        .await
        .unwrap();
    let fence = Fence::open(&url, &name).await.unwrap();
    let locker = Locker::connect(&redis_url()).await.unwrap();
    let lease = locker.acquire(&name, &opts()).await.unwrap();
    write("sqlite", &fence, &lease).await.unwrap();
    let (origins,): (Option<String>,) =
        sqlx::query_as("SELECT origins FROM fencelock_fences WHERE resource = ?")
            .bind(name.as_bytes())
            .fetch_one(&old)
            .await
            .unwrap();
    assert_eq!(
        origins.map(|o| o.len()),
        Some(16),
        "the token's mark is recorded"
    );
    lease.release().await.unwrap();
    fence.close().await;
    old.close().await;
}
