//! The backends the contract runs on, how to reach each, the one skip policy, and the table of
//! what a backend does not offer (with the reason).

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use fencelock::{Locker, LockerOptions};

pub use crate::support::probe::WaitProbe;
use crate::support::{self, url};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Sqlite,
    Redis,
    RedisTls,
    RedisAcl,
    RedisCluster,
    Redlock,
    ZooKeeper,
    ZkEnsemble,
    Postgres,
    MariaDb,
}

impl Target {
    pub const ALL: [Target; 10] = [
        Target::Sqlite,
        Target::Redis,
        Target::RedisTls,
        Target::RedisAcl,
        Target::RedisCluster,
        Target::Redlock,
        Target::ZooKeeper,
        Target::ZkEnsemble,
        Target::Postgres,
        Target::MariaDb,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Target::Sqlite => "sqlite",
            Target::Redis => "redis",
            Target::RedisTls => "redis_tls",
            Target::RedisAcl => "redis_acl",
            Target::RedisCluster => "redis_cluster",
            Target::Redlock => "redlock",
            Target::ZooKeeper => "zookeeper",
            Target::ZkEnsemble => "zk_ensemble",
            Target::Postgres => "postgres",
            Target::MariaDb => "mariadb",
        }
    }

    /// The `tests/servers.sh start` group that serves it.
    fn server_group(self) -> Option<&'static str> {
        match self {
            Target::Sqlite => None,
            Target::Redis | Target::RedisTls | Target::RedisAcl => Some("redis"),
            Target::RedisCluster => Some("cluster"),
            Target::Redlock => Some("redlock"),
            Target::ZooKeeper => Some("zookeeper"),
            Target::ZkEnsemble => Some("zk-ensemble"),
            Target::Postgres => Some("postgres"),
            Target::MariaDb => Some("mariadb"),
        }
    }

    /// Its URL, from `FENCELOCK_TEST_<NAME>_URL` or the ports of tests/SERVERS.md. ZooKeeper's
    /// sessions are short (2 s) so that losses come quickly; its heartbeat ticks every 500 ms.
    pub fn url(self) -> String {
        match self {
            Target::Sqlite | Target::Redis | Target::Postgres | Target::MariaDb => {
                support::backend_url(self.name())
            }
            Target::ZooKeeper => support::backend_url("zookeeper"),
            Target::RedisTls => url(
                "REDIS_TLS",
                "rediss://127.0.0.1:6380?ca=/tmp/fencelock-servers/redis-tls/ca.crt",
            ),
            Target::RedisAcl => url(
                "REDIS_ACL",
                "redis://fencelock:fencelock-test@127.0.0.1:6381",
            ),
            Target::RedisCluster => support::cluster_url(),
            Target::Redlock => support::redlock_url(),
            Target::ZkEnsemble => format!(
                "{}?session_timeout_ms=2000&tick_ms=500",
                url(
                    "ZK_ENSEMBLE",
                    "zk://127.0.0.1:2281,127.0.0.1:2282,127.0.0.1:2283"
                )
            ),
        }
    }

    /// `host:port` of every server the URL names.
    fn addresses(self) -> Vec<String> {
        let url = self.url();
        let Some((_, rest)) = url.split_once("://") else {
            return Vec::new();
        };
        let rest = rest.rsplit_once('@').map_or(rest, |(_, hosts)| hosts);
        let hosts = rest.split(['/', '?']).next().unwrap_or_default();
        hosts
            .split(',')
            .filter(|h| !h.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// Whether every server answers a TCP connection (SQLite needs none).
    pub fn reachable(self) -> Result<(), String> {
        for address in self.addresses() {
            let answers = address
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_secs(1)).is_ok());
            if !answers {
                return Err(format!(
                    "{address} does not answer (bash tests/servers.sh start {})",
                    self.server_group().unwrap_or("?")
                ));
            }
        }
        Ok(())
    }

    pub async fn locker(self) -> Locker {
        Locker::connect(&self.url())
            .await
            .unwrap_or_else(|e| panic!("{}: connect: {e}", self.name()))
    }

    pub async fn locker_with(self, options: LockerOptions) -> Locker {
        Locker::connect_with(&self.url(), options)
            .await
            .unwrap_or_else(|e| panic!("{}: connect: {e}", self.name()))
    }

    /// A Locker whose acquires report when they start waiting (see [`WaitProbe`]).
    pub async fn probed_locker(self) -> (Locker, WaitProbe) {
        self.probed_locker_with(LockerOptions::default()).await
    }

    /// [`Target::probed_locker`] with these options.
    pub async fn probed_locker_with(self, options: LockerOptions) -> (Locker, WaitProbe) {
        let probe = WaitProbe::default();
        let locker = self.locker_with(probe.install(options)).await;
        (locker, probe)
    }
}

/// Whether the backend offers semaphores: every one but Redlock (a permit won on a majority
/// of masters does not bound the holders to N).
pub fn offers_semaphores(target: Target) -> bool {
    target != Target::Redlock
}

/// What a backend does not offer, by scenario, with the reason: the one table the suite reads.
pub fn not_offered(target: Target, scenario: &str) -> Option<&'static str> {
    if crate::conformance::semaphore::NEED_SEMAPHORES.contains(&scenario)
        && !offers_semaphores(target)
    {
        return Some(
            "Redlock offers no semaphores; the scenario semaphores_are_refused_where_the_\
             backend_does_not_offer_them checks the INVALID_ARGUMENT refusal there",
        );
    }
    match (target, scenario) {
        (
            Target::ZooKeeper | Target::ZkEnsemble,
            "an_extend_moves_the_deadline_and_the_servers_expiry",
        ) => Some(
            "the session is the lease: its ttl is the negotiated session timeout, which extend \
             neither lengthens nor shortens (it waits for the next heartbeat), and there is no \
             server-side expiry to read (expires_at and time_left are None; docs/design.md \
             §1.2, §3.4)",
        ),
        (Target::ZooKeeper | Target::ZkEnsemble, "tokens_are_floored_by_the_servers_clock") => {
            Some(
                "a token is the lock node's czxid, the ensemble's transaction counter, never \
                 reused and never a clock (docs/design.md §1.3, §3.4)",
            )
        }
        (
            Target::RedisAcl,
            "list_finds_held_locks_by_prefix_and_treats_the_prefix_as_data"
            | "list_shows_held_names_of_every_kind",
        ) => Some(
            "list walks the key space with SCAN, an operator's command that the \
             least-privilege ACL user of docs/redis.md is not granted: it answers AUTH \
             (NOPERM) there",
        ),
        _ => None,
    }
}

/// Runs one scenario on one backend under the skip policy: with FENCELOCK_REQUIRE_SERVERS=1 a
/// server that does not answer fails the test; otherwise the test passes at once with a line
/// on stderr (libtest has no skip at run time), and `skipped_backends` lists them all.
pub async fn run<F, Fut>(target: Target, scenario: &str, body: F)
where
    F: FnOnce(Target) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    if let Some(reason) = not_offered(target, scenario) {
        eprintln!("not offered: {scenario} on {}: {reason}", target.name());
        return;
    }
    if let Err(why) = target.reachable() {
        assert!(
            std::env::var("FENCELOCK_REQUIRE_SERVERS").as_deref() != Ok("1"),
            "{}: {why}",
            target.name()
        );
        eprintln!("skipped: {scenario} on {}: {why}", target.name());
        return;
    }
    body(target).await;
}
