//! `fencelock elect`: real OS processes campaigning on one SQLite file.

use std::process::Child;
use std::time::{Duration, Instant};

use crate::support::*;

const LONG: Duration = Duration::from_secs(30);

/// Each line CMD writes: who ran it, FENCELOCK_TERM, FENCELOCK_TOKEN and its pid.
const REPORT: &str = r#"echo "$WHO $FENCELOCK_TERM $FENCELOCK_TOKEN $$" >> "$LOG""#;

struct Line {
    who: String,
    term: u64,
    pid: i32,
}

fn lines(sandbox: &Sandbox) -> Vec<Line> {
    std::fs::read_to_string(sandbox.path("log"))
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(parts.len(), 4, "{line:?}");
            assert_eq!(
                parts[1], parts[2],
                "FENCELOCK_TERM and FENCELOCK_TOKEN differ: {line:?}"
            );
            Line {
                who: parts[0].to_string(),
                term: parts[1].parse().unwrap(),
                pid: parts[3].parse().unwrap(),
            }
        })
        .collect()
}

fn wait_for_lines(sandbox: &Sandbox, count: usize) -> Vec<Line> {
    let started = Instant::now();
    loop {
        let found = lines(sandbox);
        if found.len() >= count {
            return found;
        }
        assert!(
            started.elapsed() < LONG,
            "only {} of {count} runs of CMD were logged",
            found.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn candidate(sandbox: &Sandbox, who: &str, extra: &[&str], script: &str) -> Child {
    let mut command = sandbox.command();
    command.env("WHO", who).env("LOG", sandbox.path("log"));
    command
        .arg("elect")
        .args(extra)
        .args(["scheduler", "--", "sh", "-c", script]);
    command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: signalling a child process we started.
    unsafe { libc::kill(child.id() as i32, sig) };
}

#[test]
fn one_leader_at_a_time_and_the_standby_takes_over_with_a_larger_term() {
    let sandbox = Sandbox::new();
    // CMD works until its stop file appears, then exits 3.
    let script = format!("{REPORT}; while [ ! -e \"stop-$WHO\" ]; do sleep 0.05; done; exit 3");
    let mut first = candidate(&sandbox, "first", &[], &script);
    let leader = wait_for_lines(&sandbox, 1);
    assert_eq!(leader[0].who, "first");
    let mut second = candidate(&sandbox, "second", &[], &script);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        lines(&sandbox).len(),
        1,
        "the second candidate must not lead while the first does"
    );

    std::fs::write(sandbox.path("stop-first"), "").unwrap();
    assert_eq!(
        wait_child(&mut first, LONG).code(),
        Some(3),
        "the leader exits with CMD's code"
    );
    let both = wait_for_lines(&sandbox, 2);
    assert_eq!(both[1].who, "second");
    assert!(
        both[1].term > both[0].term,
        "terms increase: {} then {}",
        both[0].term,
        both[1].term
    );

    std::fs::write(sandbox.path("stop-second"), "").unwrap();
    assert_eq!(wait_child(&mut second, LONG).code(), Some(3));
}

#[test]
fn a_lost_leadership_stops_cmd_and_fencelock_campaigns_again() {
    let sandbox = Sandbox::new();
    let script = format!("{REPORT}; exec sleep 1000");
    let mut leader = candidate(&sandbox, "only", &["--ttl", "1500ms"], &script);
    let first = wait_for_lines(&sandbox, 1);

    // Another owner takes the lock by hand: the next renewal finds it is no longer ours.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let pool = sqlx::SqlitePool::connect(&sandbox.url()).await.unwrap();
        sqlx::query("UPDATE fencelock_locks SET owner = x'0000000000000000000000000000000F', token = token + 1 WHERE name = ?1")
            .bind(&b"scheduler"[..])
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    });
    assert!(
        wait_until_gone(first[0].pid, LONG),
        "CMD kept running after leadership was lost"
    );
    // Once the foreign entry expires, the same process leads again, in a later term.
    let again = wait_for_lines(&sandbox, 2);
    assert_eq!(again[1].who, "only");
    assert!(again[1].term > first[0].term);

    // TERM is forwarded to CMD and ends fencelock: no further campaign.
    signal(&leader, libc::SIGTERM);
    assert_eq!(
        wait_child(&mut leader, LONG).code(),
        Some(128 + libc::SIGTERM)
    );
    assert!(wait_until_gone(again[1].pid, Duration::from_secs(5)));
}

#[test]
fn restart_reruns_cmd_in_a_new_term_each_time() {
    let sandbox = Sandbox::new();
    // The first two runs fail at once; the third keeps running.
    let script = format!("{REPORT}; [ \"$(wc -l < \"$LOG\")\" -ge 3 ] && exec sleep 1000; exit 1");
    let mut leader = candidate(
        &sandbox,
        "looping",
        &["--restart", "--restart-delay", "100ms"],
        &script,
    );
    let runs = wait_for_lines(&sandbox, 3);
    assert!(runs[0].term < runs[1].term && runs[1].term < runs[2].term);
    signal(&leader, libc::SIGINT);
    assert_eq!(
        wait_child(&mut leader, LONG).code(),
        Some(128 + libc::SIGINT)
    );
    assert_eq!(
        lines(&sandbox).len(),
        3,
        "a signal ends fencelock; it does not restart CMD"
    );
}

#[test]
fn a_signal_while_campaigning_ends_fencelock_at_once() {
    let sandbox = Sandbox::new();
    let script = format!("{REPORT}; exec sleep 1000");
    let mut leader = candidate(&sandbox, "leader", &[], &script);
    wait_for_lines(&sandbox, 1);
    let mut waiting = candidate(&sandbox, "waiting", &[], &script);
    std::thread::sleep(Duration::from_millis(500));
    signal(&waiting, libc::SIGTERM);
    assert_eq!(
        wait_child(&mut waiting, LONG).code(),
        Some(128 + libc::SIGTERM)
    );
    assert_eq!(
        lines(&sandbox).len(),
        1,
        "the waiting candidate never ran CMD"
    );
    signal(&leader, libc::SIGTERM);
    wait_child(&mut leader, LONG);
}

#[test]
fn bad_inputs_get_the_usage_exit_code() {
    let sandbox = Sandbox::new();
    for args in [
        vec!["elect", "scheduler"],
        vec!["elect", "--ttl", "soon", "scheduler", "--", "true"],
        vec!["elect", "--restart-delay", "-1s", "scheduler", "--", "true"],
        vec!["elect", "", "--", "true"],
    ] {
        let out = sandbox.run(&args);
        assert_eq!(code(&out), 125, "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).is_empty());
    }
    let out = sandbox.run(&["elect", "scheduler", "--", "/nonexistent/program"]);
    assert_eq!(code(&out), 127, "{}", stderr(&out));
}

/// The backends to campaign on: SQLite always, and each server whose URL the environment gives
/// (`tests/servers.sh env`; CI sets them all).
fn backends(sandbox: &Sandbox) -> Vec<(String, String)> {
    let mut found = vec![("sqlite".to_string(), sandbox.url())];
    for (backend, var) in [
        ("redis", "FENCELOCK_TEST_REDIS_URL"),
        ("zookeeper", "FENCELOCK_TEST_ZK_URL"),
        ("postgres", "FENCELOCK_TEST_POSTGRES_URL"),
        ("mariadb", "FENCELOCK_TEST_MARIADB_URL"),
    ] {
        match std::env::var(var) {
            Ok(url) => found.push((backend.to_string(), url)),
            Err(_) => assert!(
                std::env::var("FENCELOCK_REQUIRE_SERVERS").as_deref() != Ok("1"),
                "{var} is not set"
            ),
        }
    }
    found
}

#[test]
fn kill_9_of_the_leader_elects_another_within_its_ttl_on_every_backend() {
    let sandbox = Sandbox::new();
    for (backend, url) in backends(&sandbox) {
        // A fresh election per backend; a short ZooKeeper session plays the part of the ttl.
        let election = format!("elect-kill-{backend}-{}", std::process::id());
        let url = if backend == "zookeeper" {
            format!("{url}?session_timeout_ms=2000&tick_ms=500")
        } else {
            url
        };
        let log = sandbox.path(&format!("{backend}.log"));
        let script =
            r#"echo "$WHO $FENCELOCK_TERM $FENCELOCK_TOKEN $$" >> "$LOG"; exec sleep 1000"#;
        let spawn = |who: &str| {
            let mut command = sandbox.command();
            command
                .env("WHO", who)
                .env("LOG", &log)
                .env("FENCELOCK_URL", &url);
            command.args(["elect", "--ttl", "2s", &election, "--", "sh", "-c", script]);
            command
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        };
        let read = || -> Vec<(String, u64, i32)> {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .map(|line| {
                    let parts: Vec<&str> = line.split_whitespace().collect();
                    (
                        parts[0].to_string(),
                        parts[1].parse().unwrap(),
                        parts[3].parse().unwrap(),
                    )
                })
                .collect()
        };
        let wait_for = |count: usize| {
            let started = Instant::now();
            loop {
                let lines = read();
                if lines.len() >= count {
                    return (lines, ());
                }
                assert!(
                    started.elapsed() < LONG,
                    "{backend}: only {} runs of CMD",
                    lines.len()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        let mut first = spawn("first");
        let (lines, _) = wait_for(1);
        let mut second = spawn("second");
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(read().len(), 1, "{backend}: only the leader runs CMD");

        // kill -9: no resignation; the guardian kills CMD, and the lease runs out.
        let killed = Instant::now();
        first.kill().unwrap();
        first.wait().unwrap();
        assert!(
            wait_until_gone(lines[0].2, Duration::from_secs(10)),
            "{backend}: CMD outlived its fencelock"
        );
        let (lines, _) = wait_for(2);
        let took = killed.elapsed();
        assert_eq!(lines[1].0, "second", "{backend}");
        assert!(lines[1].1 > lines[0].1, "{backend}: the new term is larger");
        // ttl 2 s (or the 2 s session) plus a generous margin for a slow machine.
        assert!(
            took < Duration::from_secs(2) + Duration::from_secs(8),
            "{backend}: took {took:?}"
        );
        signal(&second, libc::SIGTERM);
        wait_child(&mut second, LONG);
    }
}
