//! CMD never runs past the lease, whatever happens to the `fencelock` process: killed with its
//! process group, stopped, suspended from a terminal, with its stderr blocked; and it behaves in
//! a terminal as a shell's job would. Real processes, real signals, a pty where a terminal
//! matters.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::pty::Shell;
use crate::support::*;

/// A CMD that writes "<who> <token> <nanoseconds>" lines to `log` every 50 ms, after writing its
/// pid to `pid_file`; with `trap_term`, it ignores SIGTERM.
fn writer_script(who: &str, log: &Path, pid_file: &Path, trap_term: bool) -> String {
    format!(
        "{trap}echo $$ > {pid}; while :; do echo \"{who} $FENCELOCK_TOKEN $(date +%s%N)\" >> {log}; sleep 0.05; done",
        trap = if trap_term { "trap '' TERM; " } else { "" },
        pid = pid_file.display(),
        log = log.display(),
    )
}

fn read_pid(path: &Path) -> i32 {
    wait_for_file(path, Duration::from_secs(20))
        .trim()
        .parse()
        .unwrap()
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: signalling a process (or, negative, a group) this test started.
    unsafe { libc::kill(pid, sig) };
}

/// The process state letter from /proc (R, S, T, Z, ...), or None once it is gone.
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

fn wait_for_state(pid: i32, wanted: char, within: Duration) {
    let started = Instant::now();
    while state(pid) != Some(wanted) {
        assert!(
            started.elapsed() < within,
            "process {pid} is {:?}, not {wanted:?}, after {within:?}",
            state(pid)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pids of `parent`'s children.
fn children_of(parent: i32) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split(' ').nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(parent) {
            found.push(pid);
        }
    }
    found
}

/// The lines of a writer's log, as (who, token, nanoseconds).
fn log_lines(log: &Path) -> Vec<(String, u64, u128)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut words = line.split(' ');
            Some((
                words.next()?.to_string(),
                words.next()?.parse().ok()?,
                words.next()?.parse().ok()?,
            ))
        })
        .collect()
}

#[test]
fn a_sigkill_to_fencelocks_whole_process_group_kills_cmds_group_within_a_second() {
    let sandbox = Sandbox::new();
    let pids = sandbox.path("pids");
    let script = format!("sleep 1000 & echo \"$$ $!\" > {}; wait", pids.display());
    // Its own process group, as `timeout`, a supervisor or a shell's job gives it.
    let mut fencelock = sandbox
        .command()
        .args(["run", "--ttl", "30s", "job", "--", "sh", "-c", &script])
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let text = wait_for_file(&pids, Duration::from_secs(20));
    let (cmd, grandchild) = {
        let mut it = text.split_whitespace().map(|p| p.parse::<i32>().unwrap());
        (it.next().unwrap(), it.next().unwrap())
    };
    signal(-(fencelock.id() as i32), libc::SIGKILL);
    fencelock.wait().unwrap();
    assert!(
        wait_until_gone(cmd, Duration::from_secs(1))
            && wait_until_gone(grandchild, Duration::from_secs(1)),
        "CMD's group outlived a SIGKILL of fencelock's process group by more than 1 s"
    );
}

#[test]
fn timeout_s_kill_of_fencelock_kills_cmd_within_a_second() {
    let sandbox = Sandbox::new();
    let pid_file = sandbox.path("pid");
    let script = format!("echo $$ > {}; exec sleep 1000", pid_file.display());
    // GNU timeout runs fencelock in timeout's own process group and signals that group.
    let mut timeout = Command::new("timeout")
        .args([
            "-s", "KILL", "3", BIN, "run", "--ttl", "30s", "job", "--", "sh", "-c", &script,
        ])
        .env("FENCELOCK_URL", sandbox.url())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let cmd = read_pid(&pid_file);
    let status = wait_child(&mut timeout, Duration::from_secs(20));
    // timeout signals its own process group, so it dies of the SIGKILL too.
    assert!(
        status.code() == Some(137)
            || std::os::unix::process::ExitStatusExt::signal(&status) == Some(9),
        "{status:?}"
    );
    assert!(
        wait_until_gone(cmd, Duration::from_secs(1)),
        "CMD outlived `timeout -s KILL` of fencelock by more than 1 s"
    );
}

#[test]
fn the_guardian_has_a_session_of_its_own_and_a_name_without_fencelock() {
    let sandbox = Sandbox::new();
    let pid_file = sandbox.path("pid");
    let script = format!("echo $$ > {}; exec sleep 1000", pid_file.display());
    let mut fencelock = sandbox.spawn(&["run", "job", "--", "sh", "-c", &script]);
    let cmd = read_pid(&pid_file);
    let guardians: Vec<i32> = children_of(fencelock.id() as i32)
        .into_iter()
        .filter(|&pid| pid != cmd)
        .collect();
    assert_eq!(
        guardians.len(),
        1,
        "fencelock's children: CMD and one guardian"
    );
    let guardian = guardians[0];
    let comm = std::fs::read_to_string(format!("/proc/{guardian}/comm")).unwrap();
    let cmdline = std::fs::read(format!("/proc/{guardian}/cmdline")).unwrap();
    // `killall fencelock`, `pkill -x fencelock` and `pkill -f fencelock` match these.
    assert!(!comm.contains("fencelock"), "guardian's name: {comm:?}");
    assert!(
        !String::from_utf8_lossy(&cmdline).contains("fencelock"),
        "guardian's command line: {:?}",
        String::from_utf8_lossy(&cmdline)
    );
    // SAFETY: reading the session ids of processes this test started.
    let (own, theirs) = unsafe { (libc::getsid(fencelock.id() as i32), libc::getsid(guardian)) };
    assert_ne!(own, theirs, "the guardian shares fencelock's session");
    fencelock.kill().unwrap();
    fencelock.wait().unwrap();
    assert!(wait_until_gone(cmd, Duration::from_secs(5)));
}

/// fencelock A holds the lock with a writer CMD, then is stopped (SIGSTOP) for longer than
/// the ttl; fencelock B waits for the lock and writes one line. Returns the log's lines and
/// A's CMD pid, after checking that A's CMD was gone by A's deadline (at most the stop plus
/// the ttl) plus 1 s.
fn stop_the_holder_past_its_ttl(trap_term: bool) -> Vec<(String, u64, u128)> {
    let sandbox = Sandbox::new();
    let log = sandbox.path("writes.log");
    let pid_file = sandbox.path("a.pid");
    let ttl = Duration::from_secs(2);
    let script = writer_script("A", &log, &pid_file, trap_term);
    let mut a = sandbox.spawn(&["run", "--ttl", "2s", "job", "--", "sh", "-c", &script]);
    let cmd = read_pid(&pid_file);
    // A has renewed at least once.
    std::thread::sleep(Duration::from_millis(900));
    signal(a.id() as i32, libc::SIGSTOP);
    let stopped = Instant::now();
    let b_script = format!(
        "echo \"B $FENCELOCK_TOKEN $(date +%s%N)\" >> {}",
        log.display()
    );
    let b = sandbox.run(&[
        "run", "--ttl", "2s", "--wait", "30s", "job", "--", "sh", "-c", &b_script,
    ]);
    assert_eq!(code(&b), 0, "B: {}", stderr(&b));
    assert!(
        !is_running(cmd) || stopped.elapsed() < ttl + Duration::from_secs(1),
        "A's CMD still runs {:?} after A was stopped",
        stopped.elapsed()
    );
    let gone_by = (ttl + Duration::from_secs(1)).saturating_sub(stopped.elapsed());
    assert!(
        wait_until_gone(cmd, gone_by),
        "A's CMD outlived A's deadline by more than 1 s"
    );
    signal(a.id() as i32, libc::SIGCONT);
    let status = wait_child(&mut a, Duration::from_secs(20));
    assert_eq!(
        status.code(),
        Some(122),
        "A reports the loss once continued"
    );
    log_lines(&log)
}

fn assert_a_before_b(lines: &[(String, u64, u128)]) {
    let first_b = lines
        .iter()
        .position(|(who, _, _)| who == "B")
        .expect("B wrote its line");
    assert!(first_b > 0, "A wrote nothing: {lines:?}");
    let b_token = lines[first_b].1;
    for (who, token, _) in &lines[first_b + 1..] {
        assert_ne!(who, "A", "A's CMD wrote after B had the lock");
        assert!(*token >= b_token);
    }
    assert!(
        lines[..first_b]
            .iter()
            .all(|(_, token, _)| *token < b_token)
    );
}

#[test]
fn fencelock_stopped_past_its_ttl_a_cmd_that_exits_on_sigterm_ends_before_the_next_holder() {
    assert_a_before_b(&stop_the_holder_past_its_ttl(false));
}

#[test]
fn fencelock_stopped_past_its_ttl_a_cmd_that_traps_sigterm_is_killed_at_the_deadline() {
    let lines = stop_the_holder_past_its_ttl(true);
    assert_a_before_b(&lines);
}

#[test]
fn a_cmd_stopped_for_longer_than_the_ttl_is_killed_and_the_lock_released() {
    let sandbox = Sandbox::new();
    let log = sandbox.path("writes.log");
    let pid_file = sandbox.path("pid");
    let script = writer_script("A", &log, &pid_file, false);
    let mut fencelock = sandbox.spawn(&["run", "--ttl", "2s", "job", "--", "sh", "-c", &script]);
    let cmd = read_pid(&pid_file);
    let stopped = Instant::now();
    signal(-cmd, libc::SIGSTOP);
    let status = wait_child(&mut fencelock, Duration::from_secs(20));
    assert!(
        stopped.elapsed() >= Duration::from_secs(2),
        "killed before the ttl passed"
    );
    assert_eq!(status.code(), Some(122));
    let mut err = String::new();
    std::io::Read::read_to_string(fencelock.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains("stopped for longer than the ttl"), "{err}");
    assert!(!is_running(cmd));
    let status = sandbox.run(&["status", "job"]);
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("free"),
        "released: {}",
        String::from_utf8_lossy(&status.stdout)
    );
}

#[test]
fn the_kill_on_loss_does_not_wait_for_a_stderr_nobody_reads() {
    let sandbox = Sandbox::new();
    let beat = sandbox.path("beat");
    let pid_file = sandbox.path("pid");
    // CMD fills the shared stderr pipe (its writer blocks in the background), then beats.
    let script = format!(
        "echo $$ > {pid}; head -c 300000 /dev/zero >&2 & while :; do date +%s%N > {beat}; sleep 0.05; done",
        pid = pid_file.display(),
        beat = beat.display()
    );
    let mut fencelock = sandbox
        .command()
        .args(["run", "--ttl", "3s", "job", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let cmd = read_pid(&pid_file);
    std::thread::sleep(Duration::from_millis(300));
    let out = sandbox.run(&["release", "--force", "job"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let released = Instant::now();
    // The holder learns of it at its next renewal (every ttl/3 = 1 s).
    assert!(
        wait_until_gone(cmd, Duration::from_secs(1) + Duration::from_secs(5)),
        "CMD still runs {:?} after its lease was taken over",
        released.elapsed()
    );
    fencelock.kill().unwrap();
    fencelock.wait().unwrap();
}

#[test]
fn a_group_member_that_cannot_be_killed_is_reported_and_the_lease_treated_as_lost() {
    // fencelock runs as nobody; a member of CMD's group runs as root, so its kill fails (EPERM).
    let sandbox = Sandbox::new();
    let dir = sandbox.path("");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let pid_file = sandbox.path("pid");
    let stop = sandbox.path("stop");
    let script = format!(
        "echo $$ > {pid}; while [ ! -e {stop} ]; do sleep 0.05; done",
        pid = pid_file.display(),
        stop = stop.display()
    );
    let mut fencelock = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
        .args(["run", "--ttl", "10s", "job", "--", "sh", "-c", &script])
        .env("FENCELOCK_URL", sandbox.url())
        .current_dir(&dir)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let cmd = read_pid(&pid_file);
    let mut root_member = Command::new("sleep")
        .arg("1000")
        .process_group(cmd)
        .spawn()
        .unwrap();
    std::fs::write(&stop, "").unwrap();
    let status = wait_child(&mut fencelock, Duration::from_secs(30));
    let mut err = String::new();
    std::io::Read::read_to_string(fencelock.stderr.as_mut().unwrap(), &mut err).unwrap();
    let survived = is_running(root_member.id() as i32);
    root_member.kill().unwrap();
    root_member.wait().unwrap();
    assert!(
        survived,
        "the root member was killed by an unprivileged fencelock?"
    );
    assert_eq!(status.code(), Some(122), "{err}");
    assert!(err.contains("could not be killed"), "{err}");
}

#[test]
fn a_grace_of_ttl_3_or_more_is_clamped_with_one_warning_and_the_default_never_warns() {
    let sandbox = Sandbox::new();
    let out = sandbox.run(&["run", "--ttl", "1s", "a", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!stderr(&out).contains("grace"), "{}", stderr(&out));
    let out = sandbox.run(&["run", "--ttl", "3s", "--grace", "5s", "a", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        stderr(&out).matches("--grace").count(),
        1,
        "{}",
        stderr(&out)
    );
}

fn shell(sandbox: &Sandbox) -> Shell {
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Shell::start(
        &sandbox.path(""),
        &[("FENCELOCK_URL", sandbox.url()), ("PATH", path)],
    )
}

#[test]
fn in_a_terminal_cmd_can_read_it() {
    let sandbox = Sandbox::new();
    let mut shell = shell(&sandbox);
    shell.send("fencelock run --ttl 3s job -- sh -c 'echo ready; read line; echo \"got:$line\"'\n");
    shell.expect("ready", Duration::from_secs(20));
    shell.send("hello\n");
    shell.expect("got:hello", Duration::from_secs(20));
    shell.send("echo \"exit=$?\"\n");
    shell.expect("exit=0", Duration::from_secs(20));
}

#[test]
fn ctrl_z_suspends_the_whole_job_fg_resumes_it_and_a_suspension_past_the_ttl_is_a_loss() {
    let sandbox = Sandbox::new();
    let pid_file = sandbox.path("pid");
    let beat = sandbox.path("beat");
    let mut shell = shell(&sandbox);
    // bash, not sh: dash starts each command with vfork, and a Ctrl-Z that lands between the
    // vfork and the exec stops the child while dash waits for it uninterruptibly, so the job
    // never stops (with or without fencelock); bash forks, and stops with its child.
    shell.send(&format!(
        "fencelock run --ttl 3s job -- bash -c 'echo $$ > {pid}; while :; do date +%s%N > {beat}; sleep 0.05; done'\n",
        pid = pid_file.display(),
        beat = beat.display()
    ));
    let cmd = read_pid(&pid_file);
    let beats = || std::fs::read_to_string(&beat).unwrap_or_default();

    // Ctrl-Z: CMD and fencelock both stop, and the shell says so.
    shell.send("\x1a");
    shell.expect("Stopped", Duration::from_secs(10));
    wait_for_state(cmd, 'T', Duration::from_secs(5));
    let frozen = beats();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        beats(),
        frozen,
        "CMD kept running while the job was suspended"
    );

    // fg: both continue, and CMD still holds the lock.
    shell.send("fg\n");
    let resumed = Instant::now();
    while beats() == frozen {
        assert!(
            resumed.elapsed() < Duration::from_secs(10),
            "CMD did not resume"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // Suspended past the ttl: the guardian kills CMD at the deadline; fg reports the loss.
    shell.send("\x1a");
    let suspended = Instant::now();
    while shell.count("Stopped") < 2 {
        assert!(
            suspended.elapsed() < Duration::from_secs(10),
            "{}",
            shell.output()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Past the deadline (at most the ttl after the suspension): CMD is gone by then.
    std::thread::sleep(
        (Duration::from_secs(3) + Duration::from_millis(1500)).saturating_sub(suspended.elapsed()),
    );
    assert!(
        !is_running(cmd),
        "CMD outlived the lease while the job was suspended"
    );
    shell.send("fg\n");
    shell.send("echo \"exit=$?\"\n");
    shell.expect("exit=122", Duration::from_secs(20));
}

#[test]
fn in_the_background_a_cmd_stopped_by_the_terminal_is_killed_after_the_ttl() {
    let sandbox = Sandbox::new();
    let mut shell = shell(&sandbox);
    shell.send("fencelock run --ttl 2s job -- sh -c 'read line' &\n");
    shell.send("wait %1; echo \"exit=$?\"\n");
    shell.expect("exit=122", Duration::from_secs(20));
    assert!(shell.output().contains("stopped for longer than the ttl"));
}

/// Holds the SQLite file's write lock for `seconds` from another process, so that an acquire
/// sent meanwhile is answered only when it ends; returns once the file is locked.
fn stall_sqlite_writes(db: &Path, seconds: f64) -> std::process::Child {
    let mut stall = Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys, time\n\
             c = sqlite3.connect(sys.argv[1], isolation_level=None)\n\
             c.execute('BEGIN EXCLUSIVE')\n\
             print('locked', flush=True)\n\
             time.sleep(float(sys.argv[2]))\n\
             c.execute('COMMIT')\n",
        ])
        .arg(db)
        .arg(seconds.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(stall.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");
    stall
}

#[test]
fn a_grant_answered_past_its_lease_never_starts_cmd() {
    // The SQLite file is locked by another writer for longer than the ttl while fencelock
    // acquires once: the grant is answered after the lease's client deadline, so the core gives
    // it back instead of returning a lease already lost, and CMD is never started (before the
    // core refused such grants, CMD was started on that lease, or killed at once).
    let sandbox = Sandbox::new();
    let marker = sandbox.path("ran");
    let db = sandbox.path("locks.db");
    // Create the table first.
    assert_eq!(code(&sandbox.run(&["run", "job", "--", "true"])), 0);
    let mut stall = stall_sqlite_writes(&db, 1.5);
    let script = format!("echo ran > {}", marker.display());
    let args = [
        "run", "--wait", "0", "--ttl", "500ms", "job", "--", "sh", "-c", &script,
    ];
    let out = sandbox.run(&args);
    stall.wait().unwrap();
    assert!(!marker.exists(), "CMD ran: {}", stderr(&out));
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("past the lease's client deadline"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_grant_answered_past_its_lease_is_taken_again_within_the_wait() {
    // As above, but fencelock may wait: it takes the lock again once the file is free and CMD
    // runs on that fresh lease.
    let sandbox = Sandbox::new();
    let marker = sandbox.path("ran");
    let db = sandbox.path("locks.db");
    assert_eq!(code(&sandbox.run(&["run", "job", "--", "true"])), 0);
    let mut stall = stall_sqlite_writes(&db, 1.5);
    let script = format!("echo \"$FENCELOCK_TOKEN\" > {}", marker.display());
    let args = [
        "run", "--wait", "30s", "--ttl", "500ms", "job", "--", "sh", "-c", &script,
    ];
    let out = sandbox.run(&args);
    stall.wait().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let token: u64 = std::fs::read_to_string(&marker)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // A later token than the first run's 1: a lease of its own.
    assert!(token >= 2, "CMD ran on token {token}");
}

#[test]
fn elect_a_sigterm_that_coincides_with_a_loss_ends_fencelock_instead_of_campaigning_again() {
    let sandbox = Sandbox::new();
    let pid_file = sandbox.path("pid");
    // CMD ignores SIGTERM, so the forwarded one does not end it before the loss.
    let script = format!(
        "trap '' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        pid_file.display()
    );
    let mut fencelock =
        sandbox.spawn(&["elect", "--ttl", "3s", "leader", "--", "sh", "-c", &script]);
    let cmd = read_pid(&pid_file);
    signal(fencelock.id() as i32, libc::SIGTERM);
    let out = sandbox.run(&["release", "--force", "leader"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let status = wait_child(&mut fencelock, Duration::from_secs(15));
    assert_eq!(status.code(), Some(122));
    assert!(!is_running(cmd));
}
