//! Apache Curator's recipes and fencelock share locks: `InterProcessMutex` and fencelock's mutex
//! queue in one line; `InterProcessSemaphoreV2` and fencelock's semaphore never hold more
//! permits together than N; `InterProcessReadWriteLock` and fencelock's read-write lock admit
//! and exclude each other as one lock. A small Java program (compiled here against Debian's
//! libcurator-recipes-java) takes the Curator side, one participant per process, driven over
//! stdin/stdout.
//!
//! Needs `tests/servers.sh start zookeeper`, `javac` and `apt-get install
//! libcurator-recipes-java`; without the last two the test says so and does nothing.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{self, unique};
use fencelock::{LockOptions, Locker};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const JARS: [&str; 5] = [
    "/usr/share/java/curator-recipes.jar",
    "/usr/share/java/curator-framework.jar",
    "/usr/share/java/curator-client.jar",
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/slf4j-nop.jar",
];

const PROGRAM: &str = r#"
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayDeque;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryNTimes;

// CuratorLock CONNECT PATH KIND, KIND one of mutex, read, write, semaphore:N: reads "acquire MS",
// "release", "quit" lines; answers each. A semaphore process may hold several leases at once
// ("release" returns the last one taken).
public class CuratorLock {
    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.newClient(args[0], 30000, 15000, new RetryNTimes(5, 200));
        client.start();
        client.blockUntilConnected();
        String kind = args[2];
        InterProcessLock lock = null;
        InterProcessSemaphoreV2 semaphore = null;
        if (kind.equals("mutex")) {
            lock = new InterProcessMutex(client, args[1]);
        } else if (kind.equals("read")) {
            lock = new InterProcessReadWriteLock(client, args[1]).readLock();
        } else if (kind.equals("write")) {
            lock = new InterProcessReadWriteLock(client, args[1]).writeLock();
        } else {
            int permits = Integer.parseInt(kind.substring("semaphore:".length()));
            semaphore = new InterProcessSemaphoreV2(client, args[1], permits);
        }
        ArrayDeque<Lease> leases = new ArrayDeque<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("ready");
        String line;
        while ((line = in.readLine()) != null) {
            String[] words = line.trim().split(" ");
            if (words[0].equals("acquire")) {
                long ms = Long.parseLong(words[1]);
                boolean got;
                if (semaphore != null) {
                    Lease lease = semaphore.acquire(ms, TimeUnit.MILLISECONDS);
                    got = lease != null;
                    if (got) {
                        leases.push(lease);
                    }
                } else {
                    got = lock.acquire(ms, TimeUnit.MILLISECONDS);
                }
                System.out.println(got ? "acquired" : "timeout");
            } else if (words[0].equals("release")) {
                if (semaphore != null) {
                    leases.pop().close();
                } else {
                    lock.release();
                }
                System.out.println("released");
            } else {
                break;
            }
        }
        client.close();
    }
}
"#;

struct Curator {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Curator {
    /// One Curator participant of `kind` (`mutex`, `read`, `write`, `semaphore:N`) on `path`.
    async fn start(classes: &Path, connect: &str, path: &str, kind: &str) -> Curator {
        let mut classpath = vec![classes.display().to_string()];
        classpath.extend(JARS.iter().map(|j| j.to_string()));
        let mut child = Command::new("java")
            .args([
                "-Xmx128m",
                "-cp",
                &classpath.join(":"),
                "CuratorLock",
                connect,
                path,
                kind,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut curator = Curator {
            child,
            stdin,
            lines,
        };
        assert_eq!(curator.answer().await, "ready");
        curator
    }

    async fn send(&mut self, command: &str) {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .unwrap();
        self.stdin.flush().await.unwrap();
    }

    async fn answer(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
            .await
            .expect("the Curator program did not answer")
            .unwrap()
            .expect("the Curator program exited")
    }
}

/// CI sets FENCELOCK_REQUIRE_SERVERS=1: there a missing prerequisite fails instead of skipping.
fn skip(why: &str) -> bool {
    assert!(
        std::env::var("FENCELOCK_REQUIRE_SERVERS").as_deref() != Ok("1"),
        "cannot run the Curator test: {why}"
    );
    println!("skipped: {why}");
    false
}

async fn compile(dir: &Path) -> bool {
    if JARS.iter().any(|j| !Path::new(j).exists()) {
        return skip("apt-get install libcurator-recipes-java to run the Curator test");
    }
    std::fs::write(dir.join("CuratorLock.java"), PROGRAM).unwrap();
    let status = match Command::new("javac")
        .args(["-nowarn", "-cp", &JARS.join(":"), "-d"])
        .arg(dir)
        .arg(dir.join("CuratorLock.java"))
        .status()
        .await
    {
        Ok(status) => status,
        Err(e) => return skip(&format!("no javac ({e})")),
    };
    assert!(status.success(), "javac failed");
    true
}

async fn node_count(raw: &zookeeper_client::Client, folder: &str) -> usize {
    raw.list_children(folder)
        .await
        .map(|c| c.len())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_and_fencelock_share_one_fifo_queue() {
    let dir = tempfile::tempdir().unwrap();
    if !compile(dir.path()).await {
        return;
    }
    let url = support::url("ZK", "zk://127.0.0.1:2181");
    let connect = support::zk_connect_string(&url);
    let raw = zookeeper_client::Client::connect(&connect).await.unwrap();
    let name = unique("curator shared/lock");
    let folder = format!("/fencelock/{}", fencelock::internals::encode_name(&name));
    let mut curator = Curator::start(dir.path(), &connect, &folder, "mutex").await;
    let locker = Locker::connect(&url).await.unwrap();

    // fencelock holds: Curator cannot get it, and leaves nothing behind when it gives up.
    let first = locker
        .acquire(&name, &LockOptions::default())
        .await
        .unwrap();
    curator.send("acquire 300").await;
    assert_eq!(curator.answer().await, "timeout");
    assert_eq!(node_count(&raw, &folder).await, 1);

    // Curator queues behind fencelock and gets the lock when fencelock releases.
    curator.send("acquire 30000").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while node_count(&raw, &folder).await != 2 {
        assert!(Instant::now() < deadline, "Curator never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.release().await.unwrap();
    assert_eq!(curator.answer().await, "acquired");

    // Curator holds: fencelock sees the holder and waits behind it in the same queue.
    let info = locker.inspect(&name).await.unwrap();
    assert!(info.held);
    assert!(info.holder.unwrap().contains("curator"));
    assert!(
        locker
            .try_acquire(&name, &LockOptions::default())
            .await
            .unwrap()
            .is_none()
    );
    let waiter = {
        let (locker, name) = (locker.clone(), name.clone());
        tokio::spawn(async move { locker.acquire(&name, &LockOptions::default()).await })
    };
    // Queued behind Curator's node (not merely started), so the release below wakes a waiter.
    let deadline = Instant::now() + Duration::from_secs(30);
    while node_count(&raw, &folder).await != 2 {
        assert!(Instant::now() < deadline, "fencelock never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!waiter.is_finished(), "fencelock took a lock Curator holds");
    curator.send("release").await;
    assert_eq!(curator.answer().await, "released");
    let next = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // Tokens are czxids: the node created later has the larger one.
    assert!(next.token() > first.token());
    next.release().await.unwrap();
    curator.send("quit").await;
    let _ = tokio::time::timeout(Duration::from_secs(10), curator.child.wait()).await;
}

/// What a test needs: the compiled program, the ZooKeeper URL and connect string, and a plain
/// client to look at nodes. `None` when the test is skipped.
struct Setup {
    classes: tempfile::TempDir,
    url: String,
    connect: String,
    raw: zookeeper_client::Client,
}

impl Setup {
    async fn new() -> Option<Setup> {
        let classes = tempfile::tempdir().unwrap();
        if !compile(classes.path()).await {
            return None;
        }
        let url = support::url("ZK", "zk://127.0.0.1:2181");
        let connect = support::zk_connect_string(&url);
        let raw = zookeeper_client::Client::connect(&connect).await.unwrap();
        Some(Setup {
            classes,
            url,
            connect,
            raw,
        })
    }

    async fn curator(&self, folder: &str, kind: &str) -> Curator {
        Curator::start(self.classes.path(), &self.connect, folder, kind).await
    }

    /// Waits until `folder` has `count` children (a participant queued, or left).
    async fn until_children(&self, folder: &str, count: usize, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while node_count(&self.raw, folder).await != count {
            assert!(Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn wait_up_to(seconds: u64) -> LockOptions {
    LockOptions::default().with_wait(Some(Duration::from_secs(seconds)))
}

/// A Curator `InterProcessSemaphoreV2` of 2 and fencelock's semaphore of 2 on the same name:
/// never more than two holders together, whoever holds; each side waits for the other's release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curator_semaphore_and_fencelock_never_exceed_its_permits_together() {
    let Some(setup) = Setup::new().await else {
        return;
    };
    let name = unique("curator semaphore");
    let folder = format!("/fencelock/{}", fencelock::internals::encode_name(&name));
    let leases = format!("{folder}/leases");
    let locker = Locker::connect(&setup.url).await.unwrap();
    let semaphore = locker.semaphore(&name, 2).unwrap();
    let mut curator = setup.curator(&folder, "semaphore:2").await;

    // One permit each: the semaphore is full for both sides.
    let ours = semaphore.acquire(&wait_up_to(10)).await.unwrap();
    curator.send("acquire 30000").await;
    assert_eq!(curator.answer().await, "acquired");
    assert!(
        semaphore
            .try_acquire(&wait_up_to(0))
            .await
            .unwrap()
            .is_none()
    );
    curator.send("acquire 300").await;
    assert_eq!(curator.answer().await, "timeout");
    // Neither refusal left a lease node behind.
    setup
        .until_children(&leases, 2, "a refused participant left its lease node")
        .await;
    let info = locker.inspect(&name).await.unwrap();
    assert_eq!(info.permits, Some(2), "{info:?}");
    assert_eq!(info.leases.len(), 2, "{info:?}");
    assert!(
        info.leases
            .iter()
            .any(|l| l.holder.as_deref().is_some_and(|h| h.contains("curator"))),
        "{info:?}"
    );

    // Curator waits for a permit (its lease node is made, and waits) and gets fencelock's.
    curator.send("acquire 30000").await;
    setup
        .until_children(&leases, 3, "Curator never waited")
        .await;
    assert!(
        semaphore
            .try_acquire(&wait_up_to(0))
            .await
            .unwrap()
            .is_none()
    );
    ours.release().await.unwrap();
    assert_eq!(curator.answer().await, "acquired");

    // Curator holds both permits: fencelock waits, and gets one when Curator returns one.
    let waiter = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move { semaphore.acquire(&wait_up_to(30)).await })
    };
    setup
        .until_children(&leases, 3, "fencelock never waited")
        .await;
    assert!(!waiter.is_finished(), "fencelock took a third permit");
    curator.send("release").await;
    assert_eq!(curator.answer().await, "released");
    let next = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(next.token() > ours.token());
    setup
        .until_children(&leases, 2, "a lease node too many")
        .await;
    next.release().await.unwrap();
    curator.send("release").await;
    assert_eq!(curator.answer().await, "released");
    curator.send("quit").await;
    let _ = tokio::time::timeout(Duration::from_secs(10), curator.child.wait()).await;

    // A semaphore Curator made (it stores no count): fencelock joins it and counts the same.
    let name = unique("curator-made semaphore");
    let folder = format!("/fencelock/{}", fencelock::internals::encode_name(&name));
    let semaphore = locker.semaphore(&name, 2).unwrap();
    let mut curator = setup.curator(&folder, "semaphore:2").await;
    curator.send("acquire 30000").await;
    assert_eq!(curator.answer().await, "acquired");
    let ours = semaphore.try_acquire(&wait_up_to(0)).await.unwrap();
    let ours = ours.expect("the second permit of a semaphore Curator made");
    assert!(
        semaphore
            .try_acquire(&wait_up_to(0))
            .await
            .unwrap()
            .is_none()
    );
    curator.send("acquire 300").await;
    assert_eq!(curator.answer().await, "timeout");
    ours.release().await.unwrap();
    curator.send("release").await;
    assert_eq!(curator.answer().await, "released");
    curator.send("quit").await;
    let _ = tokio::time::timeout(Duration::from_secs(10), curator.child.wait()).await;
    locker.close().await;
}

/// Curator's `InterProcessReadWriteLock` and fencelock's read-write lock on the same name:
/// readers of both share it, a writer of either excludes everybody, and a waiting writer of
/// either keeps new readers of the other out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_and_fencelock_read_write_locks_admit_and_exclude_each_other() {
    let Some(setup) = Setup::new().await else {
        return;
    };
    let name = unique("curator rwlock");
    let folder = format!("/fencelock/{}", fencelock::internals::encode_name(&name));
    let locker = Locker::connect(&setup.url).await.unwrap();
    let (read, write) = (
        locker.read_lock(&name).unwrap(),
        locker.write_lock(&name).unwrap(),
    );
    let mut curator_read = setup.curator(&folder, "read").await;
    let mut curator_write = setup.curator(&folder, "write").await;
    let now = wait_up_to(0);

    // Readers of both sides share it; neither side's writer gets in.
    let our_read = read.acquire(&wait_up_to(10)).await.unwrap();
    curator_read.send("acquire 30000").await;
    assert_eq!(curator_read.answer().await, "acquired");
    assert!(write.try_acquire(&now).await.unwrap().is_none());
    curator_write.send("acquire 300").await;
    assert_eq!(curator_write.answer().await, "timeout");

    // Curator's writer waits for both readers; once it waits, fencelock's new readers queue
    // behind it.
    curator_write.send("acquire 30000").await;
    setup
        .until_children(&folder, 3, "Curator's writer never queued")
        .await;
    assert!(read.try_acquire(&now).await.unwrap().is_none());
    our_read.release().await.unwrap();
    curator_read.send("release").await;
    assert_eq!(curator_read.answer().await, "released");
    assert_eq!(curator_write.answer().await, "acquired");

    // Curator writes: fencelock can neither read nor write, and reads once it is done.
    assert!(read.try_acquire(&now).await.unwrap().is_none());
    assert!(write.try_acquire(&now).await.unwrap().is_none());
    let reader = {
        let read = read.clone();
        tokio::spawn(async move { read.acquire(&wait_up_to(30)).await })
    };
    setup
        .until_children(&folder, 2, "fencelock's reader never queued")
        .await;
    assert!(
        !reader.is_finished(),
        "fencelock read beside Curator's writer"
    );
    curator_write.send("release").await;
    assert_eq!(curator_write.answer().await, "released");
    let our_read = tokio::time::timeout(Duration::from_secs(30), reader)
        .await
        .unwrap()
        .unwrap()
        .unwrap();

    // fencelock's writer waits for that reader; Curator's new reader queues behind it.
    let writer = {
        let write = write.clone();
        tokio::spawn(async move { write.acquire(&wait_up_to(30)).await })
    };
    setup
        .until_children(&folder, 2, "fencelock's writer never queued")
        .await;
    curator_read.send("acquire 300").await;
    assert_eq!(curator_read.answer().await, "timeout");
    our_read.release().await.unwrap();
    let our_write = tokio::time::timeout(Duration::from_secs(30), writer)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // A write token is above every earlier read token.
    assert!(our_write.token() > our_read.token());

    // fencelock writes: Curator can neither read nor write, and reads once it is done.
    curator_write.send("acquire 300").await;
    assert_eq!(curator_write.answer().await, "timeout");
    curator_read.send("acquire 30000").await;
    setup
        .until_children(&folder, 2, "Curator's reader never queued")
        .await;
    our_write.release().await.unwrap();
    assert_eq!(curator_read.answer().await, "acquired");
    curator_read.send("release").await;
    assert_eq!(curator_read.answer().await, "released");
    for mut curator in [curator_read, curator_write] {
        curator.send("quit").await;
        let _ = tokio::time::timeout(Duration::from_secs(10), curator.child.wait()).await;
    }
    locker.close().await;
}
