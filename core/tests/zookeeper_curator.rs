//! Apache Curator's `InterProcessMutex` and fencelock queue in one line on the same lock:
//! a small Java program (compiled here against Debian's libcurator-recipes-java) takes the
//! Curator side, driven over stdin/stdout.
//!
//! Needs `tests/servers.sh start zookeeper`, `javac` and `apt-get install
//! libcurator-recipes-java`; without the last two the test says so and does nothing.

mod support;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fencelock::{LockOptions, Locker};
use support::unique;
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
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryOneTime;

// CuratorLock CONNECT PATH: reads "acquire MS", "release", "quit" lines; answers each.
public class CuratorLock {
    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.newClient(args[0], 10000, 5000, new RetryOneTime(100));
        client.start();
        client.blockUntilConnected();
        InterProcessMutex mutex = new InterProcessMutex(client, args[1]);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("ready");
        String line;
        while ((line = in.readLine()) != null) {
            String[] words = line.trim().split(" ");
            if (words[0].equals("acquire")) {
                boolean got = mutex.acquire(Long.parseLong(words[1]), TimeUnit.MILLISECONDS);
                System.out.println(got ? "acquired" : "timeout");
            } else if (words[0].equals("release")) {
                mutex.release();
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
    async fn start(classes: &Path, connect: &str, path: &str) -> Curator {
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
    let connect = url
        .trim_start_matches("zk://")
        .split(['/', '?'])
        .next()
        .unwrap()
        .to_string();
    let raw = zookeeper_client::Client::connect(&connect).await.unwrap();
    let name = unique("curator shared/lock");
    let folder = format!("/fencelock/{}", fencelock::internals::encode_name(&name));
    let mut curator = Curator::start(dir.path(), &connect, &folder).await;
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
    let deadline = Instant::now() + Duration::from_secs(10);
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
    let deadline = Instant::now() + Duration::from_secs(10);
    while node_count(&raw, &folder).await != 2 {
        assert!(Instant::now() < deadline, "fencelock never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!waiter.is_finished(), "fencelock took a lock Curator holds");
    curator.send("release").await;
    assert_eq!(curator.answer().await, "released");
    let next = tokio::time::timeout(Duration::from_secs(10), waiter)
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
