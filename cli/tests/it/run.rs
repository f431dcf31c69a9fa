//! Real OS processes of the built `fencelock` command on one SQLite file.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

#[test]
fn contenders_never_overlap_and_tokens_increase_in_the_order_sections_ran() {
    let sandbox = Sandbox::new();
    let log = sandbox.path("sections.log");
    let script = format!(
        "echo \"start $FENCELOCK_TOKEN\" >> {log}; sleep 0.005; echo \"end $FENCELOCK_TOKEN\" >> {log}",
        log = log.display()
    );
    let contenders = 8;
    let runs = 25;
    std::thread::scope(|scope| {
        for _ in 0..contenders {
            let sandbox = &sandbox;
            let script = &script;
            scope.spawn(move || {
                for _ in 0..runs {
                    let out =
                        sandbox.run(&["run", "--ttl", "20s", "shared", "--", "sh", "-c", script]);
                    assert_eq!(code(&out), 0, "{}", stderr(&out));
                }
            });
        }
    });
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 * contenders * runs);
    let mut last = 0u64;
    for pair in lines.chunks(2) {
        let start = pair[0]
            .strip_prefix("start ")
            .expect("a section must start before the next one");
        let end = pair[1]
            .strip_prefix("end ")
            .expect("two sections overlapped");
        assert_eq!(start, end, "two sections overlapped: {pair:?}");
        let token: u64 = start.parse().unwrap();
        assert!(token > last, "token {token} ran after {last}");
        last = token;
    }
}

#[test]
fn kill_9_of_fencelock_kills_cmd_and_its_grandchild_and_the_lock_frees_after_its_ttl() {
    let sandbox = Sandbox::new();
    let pids = sandbox.path("pids");
    let script = format!("sleep 1000 & echo \"$$ $!\" > {}; wait", pids.display());
    let ttl = Duration::from_secs(3);
    let mut holder = sandbox.spawn(&["run", "--ttl", "3s", "job", "--", "sh", "-c", &script]);
    let text = wait_for_file(&pids, Duration::from_secs(20));
    let (cmd_pid, grandchild_pid) = {
        let mut it = text.split_whitespace().map(|p| p.parse::<i32>().unwrap());
        (it.next().unwrap(), it.next().unwrap())
    };
    let before = token_of(&String::from_utf8_lossy(
        &sandbox.run(&["status", "job"]).stdout,
    ));
    // Long enough for several renewals: the lock is kept, not merely not yet expired.
    std::thread::sleep(Duration::from_secs(11));
    assert!(is_running(cmd_pid) && is_running(grandchild_pid));
    let status = sandbox.run(&["status", "job"]);
    assert!(String::from_utf8_lossy(&status.stdout).contains("held"));

    holder.kill().unwrap(); // SIGKILL
    let killed_at = Instant::now();
    holder.wait().unwrap();
    assert!(
        wait_until_gone(cmd_pid, Duration::from_secs(5)),
        "CMD survived kill -9 of fencelock"
    );
    assert!(
        wait_until_gone(grandchild_pid, Duration::from_secs(5)),
        "the grandchild survived"
    );

    let out = sandbox.run(&[
        "run",
        "--wait",
        "20s",
        "job",
        "--",
        "sh",
        "-c",
        "echo $FENCELOCK_TOKEN",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let waited = killed_at.elapsed();
    assert!(
        waited <= ttl + Duration::from_secs(5),
        "acquired only after {waited:?}"
    );
    let token: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(token > before);
}

#[test]
fn a_lease_taken_over_by_hand_stops_cmd_and_exits_with_the_lost_code() {
    let sandbox = Sandbox::new();
    let pids = sandbox.path("pids");
    let script = format!("sleep 1000 & echo \"$$ $!\" > {}; wait", pids.display());
    let ttl = Duration::from_millis(1500);
    let mut holder = sandbox.spawn(&["run", "--ttl", "1500ms", "job", "--", "sh", "-c", &script]);
    let text = wait_for_file(&pids, Duration::from_secs(20));
    let grandchild: i32 = text.split_whitespace().nth(1).unwrap().parse().unwrap();

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let pool = sqlx::SqlitePool::connect(&sandbox.url()).await.unwrap();
        sqlx::query("UPDATE fencelock_locks SET owner = x'0000000000000000000000000000000F', token = token + 1 WHERE name = ?1")
            .bind(&b"job"[..])
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    });
    let taken = Instant::now();
    let status = wait_child(&mut holder, ttl + Duration::from_secs(10));
    let took = taken.elapsed();
    assert_eq!(status.code(), Some(122));
    // One renewal interval (ttl/3) plus a generous margin for a slow machine.
    assert!(
        took <= ttl / 3 + Duration::from_secs(3),
        "noticed only after {took:?}"
    );
    assert!(
        wait_until_gone(grandchild, Duration::from_secs(5)),
        "CMD's group outlived the lease"
    );
    let mut err = String::new();
    std::io::Read::read_to_string(holder.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains("lost"), "{err}");
}

#[test]
fn wait_0_on_a_held_lock_exits_at_once_with_the_conflict_code() {
    let sandbox = Sandbox::new();
    let ready = sandbox.path("ready");
    let script = format!("echo > {}; sleep 30", ready.display());
    let mut holder = sandbox.spawn(&["run", "job", "--", "sh", "-c", &script]);
    wait_for_file(&ready, Duration::from_secs(20));

    let started = Instant::now();
    let out = sandbox.run(&["run", "--wait", "0", "job", "--", "true"]);
    assert_eq!(code(&out), 124, "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(stderr(&out).contains("not acquired"), "{}", stderr(&out));
    let out = sandbox.run(&[
        "run",
        "--wait",
        "0",
        "--conflict-exit-code",
        "75",
        "job",
        "--",
        "true",
    ]);
    assert_eq!(code(&out), 75);
    let out = sandbox.run(&["run", "--wait", "300ms", "job", "--", "true"]);
    assert_eq!(code(&out), 124);

    // TERM to fencelock is forwarded to CMD; fencelock exits as CMD did (128 + 15).
    // SAFETY: signalling our own child.
    unsafe { libc::kill(holder.id() as i32, libc::SIGTERM) };
    let status = wait_child(&mut holder, Duration::from_secs(10));
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    let out = sandbox.run(&["run", "--wait", "0", "job", "--", "true"]);
    assert_eq!(
        code(&out),
        0,
        "the lock should be free again: {}",
        stderr(&out)
    );
}

#[test]
fn failing_renewals_send_sigterm_grace_before_the_deadline() {
    let sandbox = Sandbox::new();
    let url = format!("{}?busy_timeout_ms=50", sandbox.url());
    let marks = sandbox.path("marks");
    let script = format!(
        "trap 'echo term >> {m}; exit 3' TERM; echo started >> {m}; while :; do sleep 0.05; done",
        m = marks.display()
    );
    let mut holder = sandbox
        .command()
        .args([
            "run", "--url", &url, "--ttl", "3s", "--grace", "2s", "job", "--", "sh", "-c", &script,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&marks, Duration::from_secs(20));
    // Hold SQLite's write lock so every renewal fails with "busy".
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let status = rt.block_on(async {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&sandbox.url())
            .await
            .unwrap();
        sqlx::query("BEGIN EXCLUSIVE")
            .execute(&mut conn)
            .await
            .unwrap();
        let status = wait_child(&mut holder, Duration::from_secs(15));
        sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap();
        status
    });
    let marks = std::fs::read_to_string(&marks).unwrap();
    assert!(marks.contains("term"), "CMD never got SIGTERM: {marks:?}");
    // CMD's own code when it ended before the deadline, else the lost code.
    assert!(matches!(status.code(), Some(3) | Some(122)), "{status:?}");
}

#[test]
fn usr1_usr2_and_quit_reach_cmd_and_only_quit_stops_it() {
    let sandbox = Sandbox::new();
    let marks = sandbox.path("marks");
    let script = format!(
        "trap 'echo usr1 >> {m}' USR1; trap 'echo usr2 >> {m}' USR2; trap 'echo quit >> {m}; exit 5' QUIT; \
         echo started >> {m}; while :; do sleep 0.05; done",
        m = marks.display()
    );
    let mut holder = sandbox.spawn(&["run", "job", "--", "sh", "-c", &script]);
    wait_for_file(&marks, Duration::from_secs(20));
    let pid = holder.id() as i32;
    let marked = |what: &str| {
        let started = Instant::now();
        while !std::fs::read_to_string(&marks).unwrap().contains(what) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "CMD never got {what}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    for (sig, what) in [(libc::SIGUSR1, "usr1"), (libc::SIGUSR2, "usr2")] {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid, sig) };
        marked(what);
        assert!(is_running(pid), "fencelock ended on {what}");
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGQUIT) };
    marked("quit");
    let status = wait_child(&mut holder, Duration::from_secs(10));
    assert_eq!(status.code(), Some(5), "fencelock exits as CMD did");
    let out = sandbox.run(&["run", "--wait", "0", "job", "--", "true"]);
    assert_eq!(code(&out), 0, "the lock is free again: {}", stderr(&out));
}

#[test]
fn bad_inputs_get_clear_messages_and_documented_exit_codes() {
    let sandbox = Sandbox::new();
    std::fs::write(sandbox.path("not-executable"), "#!/bin/sh\n").unwrap();
    let long_name = "x".repeat(256);
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec!["run", "", "--", "true"], 125, "empty"),
        (vec!["run", &long_name, "--", "true"], 125, "256 bytes"),
        (
            vec!["run", "--ttl", "0", "job", "--", "true"],
            125,
            "too short",
        ),
        (
            vec!["run", "--ttl", "-5s", "job", "--", "true"],
            125,
            "negative",
        ),
        (
            vec!["run", "--wait", "-1", "job", "--", "true"],
            125,
            "negative",
        ),
        (
            vec!["run", "--ttl", "99999999h", "job", "--", "true"],
            125,
            "longer than a year",
        ),
        (
            vec!["run", "--ttl", "abc", "job", "--", "true"],
            125,
            "not a duration",
        ),
        (
            vec!["run", "--wait", "10 parsecs", "job", "--", "true"],
            125,
            "unknown unit",
        ),
        (
            vec!["run", "--grace", "NaN", "job", "--", "true"],
            125,
            "not a duration",
        ),
        (
            vec!["run", "--url", "ftp://x/y", "job", "--", "true"],
            125,
            "unknown URL scheme",
        ),
        (
            vec!["run", "--url", "redis://", "job", "--", "true"],
            125,
            "no host",
        ),
        (
            vec![
                "run",
                "--url",
                "redis://bob:hunter2@h:99999",
                "job",
                "--",
                "true",
            ],
            125,
            "invalid port",
        ),
        (
            vec![
                "run",
                "--url",
                "sqlite:///no/such/folder/x.db",
                "job",
                "--",
                "true",
            ],
            125,
            "does not exist",
        ),
        (
            vec!["run", "job", "--", "./not-executable"],
            126,
            "not executable",
        ),
        (
            vec!["run", "job", "--", "no-such-command-anywhere"],
            127,
            "not found",
        ),
        (vec!["run", "job"], 125, "CMD"),
        (
            vec!["run", "--conflict-exit-code", "300", "job", "--", "true"],
            125,
            "300",
        ),
        (vec!["status"], 125, "NAME"),
        (vec!["frobnicate"], 125, "unrecognized subcommand"),
    ];
    for (args, expected, words) in &cases {
        let out = sandbox.run(args);
        let err = stderr(&out);
        assert_eq!(code(&out), *expected, "{args:?}: {err}");
        assert!(
            err.contains(words),
            "{args:?}: {err:?} should mention {words:?}"
        );
        assert!(
            !err.contains("hunter2"),
            "{args:?} leaked a password: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // A NUL cannot be passed through argv; a read-only database can.
    let out = sandbox.run(&["run", "job", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // Durations take the core's units everywhere: flags, and `*_ms` URL options besides
    // their whole milliseconds.
    let busy = format!("{}?busy_timeout_ms=2s", sandbox.url());
    let out = sandbox.run(&[
        "run", "--ttl", "1min", "--grace", "1.5sec", "--url", &busy, "job", "--", "true",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let busy = format!("{}?busy_timeout_ms=2parsecs", sandbox.url());
    let out = sandbox.run(&["run", "--url", &busy, "job", "--", "true"]);
    assert_eq!(code(&out), 125);
    assert!(stderr(&out).contains("busy_timeout_ms"), "{}", stderr(&out));
    let ro = format!("{}?mode=ro", sandbox.url());
    let out = sandbox.run(&["run", "--url", &ro, "job", "--", "true"]);
    assert_eq!(code(&out), 125);
    assert!(stderr(&out).contains("read-only"), "{}", stderr(&out));
}

#[test]
fn status_names_the_holder_and_redacts_the_url() {
    let sandbox = Sandbox::new();
    let ready = sandbox.path("ready");
    let script = format!("echo > {}; sleep 30", ready.display());
    let mut holder = sandbox.spawn(&[
        "run",
        "--holder",
        "nightly batch",
        "job",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    wait_for_file(&ready, Duration::from_secs(20));
    let out = sandbox.run(&["status", "job"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(code(&out), 0);
    assert!(text.contains("held"), "{text}");
    assert!(text.contains("nightly batch"), "{text}");
    assert!(text.contains(&format!("pid {}", holder.id())), "{text}");
    assert!(text.contains("time left"), "{text}");
    holder.kill().unwrap();
    holder.wait().unwrap();
    let out = sandbox.run(&[
        "status",
        "--url",
        "postgres://bob:hunter2@127.0.0.1:1/db",
        "job",
    ]);
    assert_eq!(code(&out), 125);
    assert!(!stderr(&out).contains("hunter2"));
}

#[test]
fn the_default_url_is_a_per_user_absolute_sqlite_path() {
    let home = tempfile::tempdir().unwrap();
    let out = with_default_url(home.path())
        .args(["run", "job", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(home.path().join(".local/state/fencelock/locks.db").exists());
    let help = Command::new(BIN)
        .args(["run", "--help"])
        .env("HOME", home.path())
        .env_remove("XDG_STATE_HOME")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains(&format!(
            "sqlite://{}/.local/state/fencelock/locks.db",
            home.path().display()
        )),
        "{help}"
    );
    assert!(help.contains("122 lease lost"));

    // A home folder whose name has %, ? and # is that folder: not percent-decoded, and no part
    // of it taken for a query or a fragment.
    let odd = home.path().join("a%41b?mode=ro#c");
    std::fs::create_dir(&odd).unwrap();
    let out = with_default_url(&odd)
        .args(["run", "job", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(odd.join(".local/state/fencelock/locks.db").exists());
    assert!(!home.path().join("aAb").exists());
}
