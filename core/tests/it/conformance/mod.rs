//! The lock contract, stated once and run on every backend kind (docs/design.md §3.1), the way
//! Curator tests every lock recipe with one abstract suite: each scenario is an
//! `async fn(Target)` that uses only the public API, and [`contract!`] makes one test per
//! backend of it, named `<scenario>::<backend>`. What a backend does not offer is in one table
//! with its reason ([`backends::not_offered`]); servers that do not answer follow one skip
//! policy ([`backends::run`]).
//!
//! Tests that are about one backend (its stored layout, Curator interop, LISTEN/NOTIFY,
//! Redlock's abstention) are modules of their own in this binary (`crate::redis`, ...); fault
//! scenarios are in the `faults` binary.

mod backends;
mod cancellation;
mod election;
mod exclusion;
mod extend;
mod fence;
mod inspect;
mod kinds;
mod loss;
mod many;
mod reentry;
mod release;
mod rwlock;
mod semaphore;
mod tokens;
mod waiting;

use backends::Target;

/// Makes one test per backend of each `async fn scenario(target: Target)`.
#[macro_export]
macro_rules! contract {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            use $crate::conformance::backends::{Target, run};

            async fn on(target: Target) {
                run(target, stringify!($scenario), super::$scenario).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() { on(Target::Sqlite).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() { on(Target::Redis).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis_tls() { on(Target::RedisTls).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis_acl() { on(Target::RedisAcl).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis_cluster() { on(Target::RedisCluster).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redlock() { on(Target::Redlock).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn zookeeper() { on(Target::ZooKeeper).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn zk_ensemble() { on(Target::ZkEnsemble).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() { on(Target::Postgres).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mariadb() { on(Target::MariaDb).await }
        }
    )*};
}

/// Lists the backends whose servers do not answer, so a local run that skipped some says so
/// in one place (`cargo test --test it conformance:: -- --nocapture skipped_backends`).
#[test]
fn skipped_backends() {
    let skipped: Vec<String> = Target::ALL
        .iter()
        .filter_map(|t| {
            t.reachable()
                .err()
                .map(|why| format!("{}: {why}", t.name()))
        })
        .collect();
    if std::env::var("FENCELOCK_REQUIRE_SERVERS").as_deref() == Ok("1") {
        assert!(skipped.is_empty(), "servers missing: {skipped:#?}");
    }
    for line in &skipped {
        eprintln!("skipped backend: {line}");
    }
}
