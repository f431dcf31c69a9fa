//! A fence on the resource side (docs/design.md §3.7) takes the tokens of every backend's
//! leases: it accepts a token at least as high as the highest it accepted and refuses an older
//! one with STALE_TOKEN (nothing of that write lands), refuses a token of another lock, and
//! refuses a released or lost lease before anything is sent. The fence is SQLite in a temporary
//! directory, so it works whatever the lock's backend.

use std::time::Duration;

use fencelock::{ErrorCode, Fence, LockOptions, SqlValue, Statement};

use crate::conformance::backends::Target;
use crate::conformance::exclusion::close;
use crate::contract;
use crate::support::unique;

contract!(
    a_fence_accepts_newer_tokens_and_refuses_a_stale_one,
    a_fence_refuses_a_lost_lease_before_anything_is_sent,
);

/// A SQLite fence for `resource` in a directory of its own, with a one-row `counter` table
/// next to it that fenced writes bump.
pub struct SqliteFence {
    pub fence: Fence,
    pool: sqlx::SqlitePool,
    _dir: tempfile::TempDir,
}

impl SqliteFence {
    pub async fn open(resource: &str) -> SqliteFence {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("data.db").display());
        let fence = Fence::open(&url, resource).await.unwrap();
        let pool = sqlx::SqlitePool::connect(&format!("{url}?mode=rwc"))
            .await
            .unwrap();
        sqlx::query("CREATE TABLE counter (n INTEGER NOT NULL)")
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query("INSERT INTO counter VALUES (0)")
            .execute(&pool)
            .await
            .unwrap();
        SqliteFence {
            fence,
            pool,
            _dir: dir,
        }
    }

    /// The statement that adds one to the counter.
    pub fn bump() -> [Statement; 1] {
        [Statement::new("UPDATE counter SET n = n + ?1").bind(SqlValue::Int(1))]
    }

    /// How many fenced bumps landed.
    pub async fn count(&self) -> i64 {
        sqlx::query_scalar("SELECT n FROM counter")
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    pub async fn close(self) {
        self.fence.close().await;
        self.pool.close().await;
    }
}

async fn a_fence_accepts_newer_tokens_and_refuses_a_stale_one(target: Target) {
    let (locker, other_locker) = (target.locker().await, target.locker().await);
    let store = SqliteFence::open("counter").await;
    let (fence, bump) = (&store.fence, SqliteFence::bump());
    let name = unique("fenced");
    let options = LockOptions::default()
        .with_ttl(Duration::from_secs(30))
        .with_wait(Some(Duration::from_secs(20)));

    let old = locker.acquire(&name, &options).await.unwrap();
    assert_eq!(fence.fenced_execute(&old, &bump).await.unwrap(), vec![1]);
    // The same holder writes again with the same token.
    assert_eq!(fence.fenced_execute(&old, &bump).await.unwrap(), vec![1]);
    let old_token = old.token();
    old.release().await.unwrap();

    // The next holder, through another Locker, writes with its larger token.
    let new = other_locker.acquire(&name, &options).await.unwrap();
    assert_eq!(fence.fenced_execute(&new, &bump).await.unwrap(), vec![1]);
    assert_eq!(fence.highest().await.unwrap(), Some(new.token()));

    // The old holder's token is refused, and nothing of its write lands.
    let stale = fence.fenced_execute(old_token, &bump).await.unwrap_err();
    assert_eq!(stale.code(), ErrorCode::StaleToken, "{stale}");
    let checked = fence.check(old_token).await.unwrap_err();
    assert_eq!(checked.code(), ErrorCode::StaleToken, "{checked}");
    fence.check(&new).await.unwrap();
    assert_eq!(store.count().await, 3);
    assert_eq!(fence.highest().await.unwrap(), Some(new.token()));

    // Tokens of another lock are not ordered against this one's: refused.
    let another = locker.acquire(&unique("another"), &options).await.unwrap();
    let foreign = fence.fenced_execute(&another, &bump).await.unwrap_err();
    assert_eq!(foreign.code(), ErrorCode::InvalidArgument, "{foreign}");
    assert!(foreign.message().contains("another lock"), "{foreign}");

    // A released lease is refused before anything is sent.
    new.release().await.unwrap();
    let released = fence.fenced_execute(&new, &bump).await.unwrap_err();
    assert_eq!(released.code(), ErrorCode::NotHeld, "{released}");
    assert_eq!(store.count().await, 3);
    another.release().await.unwrap();
    store.close().await;
    close(vec![locker, other_locker]).await;
}

async fn a_fence_refuses_a_lost_lease_before_anything_is_sent(target: Target) {
    let locker = target.locker().await;
    let store = SqliteFence::open("lost").await;
    // No renewal: the lease is lost at its client deadline (the ttl, or the ZooKeeper session).
    let short = LockOptions::default()
        .with_ttl(Duration::from_millis(1500))
        .with_auto_renew(false);
    let lease = locker
        .acquire(&unique("fenced-lost"), &short)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(20), lease.lost_signal().wait())
        .await
        .expect("the lease is lost at its deadline");
    let bump = SqliteFence::bump();
    let lost = store.fence.fenced_execute(&lease, &bump).await.unwrap_err();
    assert_eq!(lost.code(), ErrorCode::Lost, "{lost}");
    let checked = store.fence.check(&lease).await.unwrap_err();
    assert_eq!(checked.code(), ErrorCode::Lost, "{checked}");
    assert_eq!(
        store.fence.highest().await.unwrap(),
        None,
        "nothing was sent"
    );
    assert_eq!(store.count().await, 0);
    store.close().await;
    locker.close().await;
}
