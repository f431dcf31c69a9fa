//! fencelock's ZooKeeper backend against the raw floor, in one run on the same server:
//!
//! - uncontended cycle: acquire + release, against a plain `zookeeper-client` session doing
//!   create EPHEMERAL_SEQUENTIAL under a parent + delete (two round trips, not yet a lock), and
//!   the textbook recipe's uncontended path: create + list children + delete (the first
//!   node holds; three round trips, the floor docs/design.md §8.1 compares with);
//! - handoff: the time from a release call to the other contender holding the lock, against
//!   the textbook recipe: create a sequential node, list the children, watch the immediate
//!   predecessor, list again when it goes.
//!
//! Raw and fencelock runs alternate in rounds, so a change in the machine's load hits both.
//! Handoffs alternate strictly between the two contenders: a contender asks again only once
//! the other holds, and every holder keeps the lock for 2 ms first, so the lock is always
//! handed to a waiter that is already parked on its watch (ops/s of the handoff rows includes
//! that hold; `BENCH_HOLD_MS` changes it).
//!
//! Usage: `cargo run --release -p fencelock-bench --bin zk_floor [HOSTS]`
//! (default 127.0.0.1:2181, the standalone test server from `bash tests/servers.sh start
//! zookeeper`).

use std::time::{Duration, Instant};

use fencelock::{Lease, LockOptions, Locker};
use fencelock_bench::{Contender, Run, handoff, hold, row};
use zookeeper_client::{Acls, Client, CreateMode};

const CYCLES: usize = 4000;
const HANDOFFS: usize = 800;
const ROUNDS: usize = 4;
/// Handoffs before the timed ones in each run.
/// How long each holder keeps the lock in the handoff runs (`BENCH_HOLD_MS` overrides it):
/// enough for the other side's create + list + exists-watch to be done, so it waits on its
/// watch when the lock is released.
const RAW_ROOT: &str = "/fencelock-bench-raw";

async fn raw_client(hosts: &str) -> Client {
    Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(hosts)
        .await
        .unwrap()
}

async fn raw_dir(client: &Client, path: &str) {
    client
        .mkdir(path, &CreateMode::Persistent.with_acls(Acls::anyone_all()))
        .await
        .unwrap();
}

fn sequential() -> zookeeper_client::CreateOptions<'static> {
    CreateMode::EphemeralSequential.with_acls(Acls::anyone_all())
}

/// `n` cycles of create EPHEMERAL_SEQUENTIAL + delete; with `list`, the recipe's check that
/// our node is the first child sits between them.
async fn uncontended_raw(client: &Client, n: usize, list: bool) -> (Vec<Duration>, Duration) {
    let dir = format!("{RAW_ROOT}/uncontended");
    let prefix = format!("{dir}/lock-");
    let options = sequential();
    let mut samples = Vec::with_capacity(n);
    let started = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        let (_, sequence) = client.create(&prefix, b"", &options).await.unwrap();
        let me = format!("lock-{sequence}");
        if list {
            let children = client.list_children(&dir).await.unwrap();
            assert_eq!(
                children.iter().min(),
                Some(&me),
                "the uncontended node is not first"
            );
        }
        client.delete(&format!("{dir}/{me}"), None).await.unwrap();
        samples.push(t.elapsed());
    }
    (samples, started.elapsed())
}

async fn uncontended_fencelock(locker: &Locker, n: usize) -> (Vec<Duration>, Duration) {
    let options = LockOptions::default();
    let mut samples = Vec::with_capacity(n);
    let started = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        let lease = locker.acquire("bench-uncontended", &options).await.unwrap();
        lease.release().await.unwrap();
        samples.push(t.elapsed());
    }
    (samples, started.elapsed())
}

/// One side of a handoff: `take` returns once it holds the lock, `give` releases it.
struct FencelockSide {
    locker: Locker,
    lease: Option<Lease>,
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

/// The textbook recipe on a plain session.
struct RecipeSide {
    client: Client,
    node: Option<String>,
}

impl Contender for RecipeSide {
    async fn take(&mut self) {
        let dir = format!("{RAW_ROOT}/handoff");
        let (_, sequence) = self
            .client
            .create(&format!("{dir}/lock-"), b"", &sequential())
            .await
            .unwrap();
        let me = format!("lock-{sequence}");
        loop {
            let mut children = self.client.list_children(&dir).await.unwrap();
            children.sort();
            let at = children
                .iter()
                .position(|c| *c == me)
                .expect("our node vanished");
            if at == 0 {
                self.node = Some(format!("{dir}/{me}"));
                return;
            }
            let predecessor = format!("{dir}/{}", children[at - 1]);
            let (stat, watcher) = self
                .client
                .check_and_watch_stat(&predecessor)
                .await
                .unwrap();
            if stat.is_some() {
                watcher.changed().await;
            }
        }
    }

    async fn give(&mut self) {
        self.client
            .delete(&self.node.take().unwrap(), None)
            .await
            .unwrap();
    }
}

async fn fencelock_sides(url: &str) -> [FencelockSide; 2] {
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let hosts = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:2181".to_string());
    let url = format!("zk://{hosts}");
    println!(
        "ZooKeeper at {hosts}; {CYCLES} uncontended cycles and {HANDOFFS} handoffs (hold {:?}) per \
         workload, in {ROUNDS} alternating rounds\n",
        hold()
    );
    let setup = raw_client(&hosts).await;
    for dir in ["uncontended", "handoff"] {
        raw_dir(&setup, &format!("{RAW_ROOT}/{dir}")).await;
    }
    println!("| workload | ops/s | p50 ms | p99 ms | vs floor |\n|---|---|---|---|---|");

    let locker = Locker::connect(&url).await.unwrap();
    // Warm up both (connections, the lock's folder, the code paths).
    uncontended_raw(&setup, 100, true).await;
    uncontended_fencelock(&locker, 100).await;
    let (mut bare, mut recipe, mut ours) = (Run::default(), Run::default(), Run::default());
    for _ in 0..ROUNDS {
        bare.add(uncontended_raw(&setup, CYCLES / ROUNDS, false).await);
        recipe.add(uncontended_raw(&setup, CYCLES / ROUNDS, true).await);
        ours.add(uncontended_fencelock(&locker, CYCLES / ROUNDS).await);
    }
    let (bare, recipe, ours) = (bare.stats(), recipe.stats(), ours.stats());
    row(
        "uncontended cycle, raw floor (create EPHEMERAL_SEQUENTIAL + delete)",
        &bare,
        None,
    );
    row(
        "uncontended cycle, raw recipe (create + list children + delete)",
        &recipe,
        Some(&bare),
    );
    row(
        "uncontended cycle, fencelock (create and list in one round trip + delete; session renewal)",
        &ours,
        Some(&bare),
    );
    locker.close().await;

    let (mut raw, mut ours) = (Run::default(), Run::default());
    for _ in 0..ROUNDS {
        let sides = [
            RecipeSide {
                client: raw_client(&hosts).await,
                node: None,
            },
            RecipeSide {
                client: raw_client(&hosts).await,
                node: None,
            },
        ];
        raw.add(handoff(sides, HANDOFFS / ROUNDS).await);
        let sides = fencelock_sides(&url).await;
        let lockers: Vec<Locker> = sides.iter().map(|s| s.locker.clone()).collect();
        ours.add(handoff(sides, HANDOFFS / ROUNDS).await);
        for l in lockers {
            l.close().await;
        }
    }
    let (raw, ours) = (raw.stats(), ours.stats());
    row(
        "handoff, raw recipe (predecessor watch, then list)",
        &raw,
        None,
    );
    row(
        "handoff, fencelock (predecessor watch, then list)",
        &ours,
        Some(&raw),
    );
}
