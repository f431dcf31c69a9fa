//! The command on ZooKeeper, whose lease lives by its session (10 s by default) whatever `--ttl`
//! says: the grace before the deadline and the guardian's timing are taken from the session.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

/// tests/partition_proxy.py in front of the shared ZooKeeper server, for this test alone: it
/// can freeze the link (nothing passes, the connection stays open) and resume it (the frozen
/// connection is reset, as after a real partition, and the client reconnects).
struct PartitionProxy {
    process: Child,
    control: u16,
    listen: u16,
}

impl PartitionProxy {
    fn start(target: u16) -> PartitionProxy {
        let free = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        let (control, listen) = (free(), free());
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/partition_proxy.py");
        let process = Command::new("python3")
            .arg(script)
            .arg(control.to_string())
            .arg(format!("{listen}:{target}"))
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let proxy = PartitionProxy {
            process,
            control,
            listen,
        };
        let started = Instant::now();
        while proxy.command("status").is_none() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the partition proxy did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        proxy
    }

    /// Sends a command on the control port; its one-line answer.
    fn command(&self, command: &str) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.control)).ok()?;
        stream.write_all(format!("{command}\n").as_bytes()).ok()?;
        let mut answer = String::new();
        BufReader::new(stream).read_line(&mut answer).ok()?;
        Some(answer.trim().to_string())
    }

    fn pause(&self) {
        assert_eq!(self.command("pause").as_deref(), Some("paused"));
    }

    fn resume(&self) {
        assert_eq!(self.command("resume").as_deref(), Some("running"));
    }
}

impl Drop for PartitionProxy {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// The shared ZooKeeper server's port, from `FENCELOCK_TEST_ZK_URL` (tests/servers.sh env);
/// `None` when the environment names none (outside CI; CI names every server).
fn zookeeper_port() -> Option<u16> {
    match std::env::var("FENCELOCK_TEST_ZK_URL") {
        Ok(url) => {
            let hosts = url.trim_start_matches("zk://").split(['/', '?']).next();
            let port = hosts.and_then(|h| h.split(',').next()?.rsplit_once(':'));
            Some(port.expect("a zk:// URL with a port").1.parse().unwrap())
        }
        Err(_) => {
            assert!(
                std::env::var("FENCELOCK_REQUIRE_SERVERS").as_deref() != Ok("1"),
                "FENCELOCK_TEST_ZK_URL is not set"
            );
            None
        }
    }
}

/// A partition of 5.5 s, which a 10 s session survives, leaves CMD running. With the grace timed
/// from `--ttl` (30 s: the default 5 s grace is below its third) fencelock sent CMD SIGTERM once
/// the frozen session had 5 s left; from the session (10 s: the grace is clamped to 2.5 s) it
/// waits until 2.5 s are left, and the partition is over before.
#[test]
fn a_partition_the_session_survives_leaves_cmd_running() {
    let Some(port) = zookeeper_port() else {
        return;
    };
    let proxy = PartitionProxy::start(port);
    let sandbox = Sandbox::new();
    let (log, go) = (sandbox.path("cmd.log"), sandbox.path("go"));
    let script = format!(
        "trap 'echo TERM >> {log}; exit 1' TERM; echo started >> {log}; \
         while [ ! -e {go} ]; do sleep 0.05; done; echo done >> {log}",
        log = log.display(),
        go = go.display()
    );
    let url = format!("zk://127.0.0.1:{}", proxy.listen);
    let name = format!("cli-zk-partition-{}", std::process::id());
    let mut fencelock = sandbox
        .command()
        .args(["run", "--url", &url, &name, "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(wait_for_file(&log, Duration::from_secs(30)), "started\n");
    let frozen = Instant::now();
    proxy.pause();
    std::thread::sleep(Duration::from_millis(5500));
    proxy.resume();
    // Past the deadline the frozen session had: had fencelock not recovered, CMD would be gone.
    while frozen.elapsed() < Duration::from_secs(12) {
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            text, "started\n",
            "CMD was ended by a partition shorter than the session"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::write(&go, "").unwrap();
    let status = wait_child(&mut fencelock, Duration::from_secs(30));
    let mut err = String::new();
    std::io::Read::read_to_string(fencelock.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "started\ndone\n");
}

/// `fencelock` stopped (SIGSTOP) while CMD runs: the guardian, which hears no new deadline, sends
/// CMD SIGTERM before the session's deadline and SIGKILL at it. Timed from `--ttl` (30 s), its
/// "silent for ttl/3 + 1 s" came after the session's deadline, so it never sent the SIGTERM:
/// CMD got SIGKILL without a warning.
#[test]
fn a_stopped_fencelock_gets_cmd_a_sigterm_before_the_sessions_deadline() {
    let Some(port) = zookeeper_port() else {
        return;
    };
    let sandbox = Sandbox::new();
    let log = sandbox.path("cmd.log");
    // SIGTERM is noted and ignored, so only the guardian's SIGKILL ends CMD.
    let script = format!(
        "trap 'echo TERM >> {log}' TERM; echo \"started $$\" >> {log}; \
         while true; do sleep 0.05; done",
        log = log.display()
    );
    let url = format!("zk://127.0.0.1:{port}");
    let name = format!("cli-zk-stopped-{}", std::process::id());
    let mut fencelock = sandbox
        .command()
        .args(["run", "--url", &url, &name, "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = wait_for_file(&log, Duration::from_secs(30));
    let cmd: i32 = started
        .trim()
        .strip_prefix("started ")
        .unwrap()
        .parse()
        .unwrap();
    let fencelock_pid = fencelock.id() as i32;
    // SAFETY: signalling the child this test started.
    unsafe { libc::kill(fencelock_pid, libc::SIGSTOP) };
    let gone = wait_until_gone(cmd, Duration::from_secs(30));
    let text = std::fs::read_to_string(&log).unwrap();
    // SAFETY: as above.
    unsafe { libc::kill(fencelock_pid, libc::SIGCONT) };
    let _ = wait_child(&mut fencelock, Duration::from_secs(30));
    assert!(gone, "CMD outlived the session's deadline");
    assert!(
        text.lines().any(|line| line == "TERM"),
        "CMD was killed with no SIGTERM first: {text:?}"
    );
}
