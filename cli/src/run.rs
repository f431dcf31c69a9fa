//! `fencelock run NAME -- CMD…`: hold the lock while CMD runs.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use fencelock::{BootInstant, ErrorCode, Lease, LockName, LockOptions, Locker};
use tokio::signal::unix::{SignalKind, signal};

use crate::guardian::{Guardian, write_all};
use crate::{UrlArg, duration, exit_code, fail, locker_options, runtime};

pub const AFTER_HELP: &str = "\
CMD runs as the leader of its own process group with FENCELOCK_TOKEN (the fencing token,
decimal) and FENCELOCK_NAME set. INT, TERM and HUP sent to fencelock are forwarded to the
group. A guardian process kills the whole group if fencelock itself dies (even kill -9).
When renewals keep failing, the group gets SIGTERM --grace before the lease's client
deadline and SIGKILL at the deadline; a lease found taken over kills the group at once.
When CMD exits, anything left in its group is killed before the lock is released.

Exit codes: CMD's own; 124 not acquired within --wait (or --conflict-exit-code);
125 fencelock's own error; 126 CMD not executable; 127 CMD not found; 122 lease lost;
128+N CMD killed by signal N.

Examples:
  fencelock run nightly-report -- ./report.sh            wait for the lock, then run
  fencelock run --wait 0 nightly-report -- ./report.sh   cron style: skip if busy (exit 124)";

/// `--wait`: a duration, `0` to try once, or `forever`.
#[derive(Debug, Clone, Copy)]
pub struct Wait(Option<Duration>);

fn parse_wait(text: &str) -> Result<Wait, String> {
    duration::parse_wait(text).map(Wait)
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    url: UrlArg,
    /// Lease length; renewed every ttl/3 while CMD runs.
    #[arg(long, default_value = "30s", value_parser = duration::parse, value_name = "DURATION", allow_hyphen_values = true)]
    ttl: Duration,
    /// How long to wait for the lock: a duration, 0 to try once, or `forever`.
    #[arg(long, default_value = "forever", value_parser = parse_wait, value_name = "DURATION", allow_hyphen_values = true)]
    wait: Wait,
    /// When renewals fail, SIGTERM the group this long before the client deadline.
    #[arg(long, default_value = "5s", value_parser = duration::parse, value_name = "DURATION", allow_hyphen_values = true)]
    grace: Duration,
    /// Exit code when the lock is not acquired within --wait.
    #[arg(long, default_value_t = exit_code::NOT_ACQUIRED, value_name = "N",
          value_parser = clap::value_parser!(i32).range(0..=255))]
    conflict_exit_code: i32,
    /// Text stored with the lock so `status` can show who holds it.
    #[arg(long, value_name = "TEXT")]
    holder: Option<String>,
    /// The lock's name (any text up to 255 bytes; it is data, never a path).
    name: String,
    /// The program to run, and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "CMD")]
    command: Vec<OsString>,
}

/// What stops CMD from being started at all.
enum Unrunnable {
    NotFound,
    NotExecutable,
}

fn find_program(program: &OsStr) -> Result<PathBuf, Unrunnable> {
    let check = |path: &Path| -> Option<Result<PathBuf, Unrunnable>> {
        let meta = std::fs::metadata(path).ok()?;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
        // SAFETY: access(2) on a NUL-terminated path we own.
        let executable = meta.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0;
        Some(if executable { Ok(path.to_path_buf()) } else { Err(Unrunnable::NotExecutable) })
    };
    if program.as_bytes().contains(&b'/') {
        return check(Path::new(program)).unwrap_or(Err(Unrunnable::NotFound));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut seen_unexecutable = false;
    for dir in std::env::split_paths(&path) {
        match check(&dir.join(program)) {
            Some(Ok(found)) => return Ok(found),
            Some(Err(_)) => seen_unexecutable = true,
            None => {}
        }
    }
    Err(if seen_unexecutable { Unrunnable::NotExecutable } else { Unrunnable::NotFound })
}

pub fn main(args: RunArgs) -> i32 {
    let url = match crate::url::resolve(&args.url) {
        Ok(url) => url,
        Err(e) => return fail(e),
    };
    if let Err(e) = LockName::new(args.name.clone()) {
        return fail(e);
    }
    let options = LockOptions::default().with_ttl(args.ttl).with_wait(args.wait.0);
    let options = match &args.holder {
        Some(text) => options.with_holder(text.clone()),
        None => options,
    };
    if let Err(e) = options.validate() {
        return fail(e);
    }
    let program_name = args.command[0].clone();
    let program = match find_program(&program_name) {
        Ok(p) => p,
        Err(Unrunnable::NotFound) => {
            eprintln!("fencelock: {}: command not found", program_name.to_string_lossy());
            return exit_code::NOT_FOUND;
        }
        Err(Unrunnable::NotExecutable) => {
            eprintln!("fencelock: {}: not executable", program_name.to_string_lossy());
            return exit_code::NOT_EXECUTABLE;
        }
    };
    // Before any thread exists (the runtime and the deadline watchdog start below).
    let guardian = match Guardian::start() {
        Ok(g) => g,
        Err(e) => return fail(format!("cannot start the guardian process: {e}")),
    };
    let code = match runtime() {
        Ok(rt) => rt.block_on(hold_and_run(&url, &args, &options, &program, guardian.write_fd())),
        Err(e) => fail(format!("cannot start: {e}")),
    };
    guardian.dismiss();
    code
}

async fn hold_and_run(url: &str, args: &RunArgs, options: &LockOptions, program: &Path, guardian_fd: i32) -> i32 {
    let locker = match Locker::connect_with(url, locker_options()).await {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let lease = match locker.acquire(&args.name, options).await {
        Ok(lease) => lease,
        Err(e) if e.code() == ErrorCode::Timeout => {
            eprintln!("fencelock: {}", e.message());
            return args.conflict_exit_code;
        }
        Err(e) => return fail(e),
    };
    let code = run_child(args, program, &lease, guardian_fd).await;
    let code = match lease.release().await {
        Ok(()) => code,
        Err(e) if e.code() == ErrorCode::Lost => {
            if code != exit_code::LOST {
                eprintln!("fencelock: {}", e);
            }
            exit_code::LOST
        }
        Err(e) if e.code() == ErrorCode::NotHeld => code,
        Err(e) => {
            eprintln!("fencelock: release failed ({e}); the lock expires on its own");
            code
        }
    };
    locker.close().await;
    code
}

/// Formats "pgid N\n" without allocating: this runs between fork and exec, where only
/// async-signal-safe work is allowed (another thread may hold the allocator's lock).
fn pgid_message(pid: libc::pid_t, buf: &mut [u8; 32]) -> usize {
    let prefix = b"pgid ";
    buf[..prefix.len()].copy_from_slice(prefix);
    let mut digits = [0u8; 12];
    let mut n = pid.max(0) as u32;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut at = prefix.len();
    for i in (0..len).rev() {
        buf[at] = digits[i];
        at += 1;
    }
    buf[at] = b'\n';
    at + 1
}

fn kill_group(pgid: libc::pid_t, sig: libc::c_int) {
    if pgid > 1 {
        // SAFETY: signalling the process group we created.
        unsafe { libc::kill(-pgid, sig) };
    }
}

async fn run_child(args: &RunArgs, program: &Path, lease: &Lease, guardian_fd: i32) -> i32 {
    let mut command = std::process::Command::new(program);
    command
        .arg0(&args.command[0])
        .args(&args.command[1..])
        .env("FENCELOCK_TOKEN", lease.token().to_string())
        .env("FENCELOCK_NAME", &args.name);
    // SAFETY: the closure only calls async-signal-safe functions (setpgid, getpid, write).
    unsafe {
        command.pre_exec(move || {
            if libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mut buf = [0u8; 32];
            let len = pgid_message(libc::getpid(), &mut buf);
            if !write_all(guardian_fd, &buf[..len]) {
                return Err(std::io::Error::other("cannot reach the guardian"));
            }
            Ok(())
        });
    }
    // Handlers first, so a signal that arrives right after CMD starts is forwarded.
    let (mut int_rx, mut term_rx, mut hup_rx) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) {
        (Ok(i), Ok(t), Ok(h)) => (i, t, h),
        _ => return fail("cannot install signal handlers"),
    };
    let mut child = match tokio::process::Command::from(command).spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("fencelock: cannot run {}: {e}", args.command[0].to_string_lossy());
            return match e.kind() {
                std::io::ErrorKind::NotFound => exit_code::NOT_FOUND,
                std::io::ErrorKind::PermissionDenied => exit_code::NOT_EXECUTABLE,
                _ => exit_code::OWN_ERROR,
            };
        }
    };
    let pgid = child.id().map(|id| id as libc::pid_t).unwrap_or(0);

    let lost = lease.lost_signal();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut terminated_for_grace = false;
    let mut lost_seen = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            _ = int_rx.recv() => kill_group(pgid, libc::SIGINT),
            _ = term_rx.recv() => kill_group(pgid, libc::SIGTERM),
            _ = hup_rx.recv() => kill_group(pgid, libc::SIGHUP),
            reason = lost.wait(), if !lost_seen => {
                lost_seen = true;
                eprintln!("fencelock: lock {:?} lost ({reason}); killing CMD's process group", args.name);
                kill_group(pgid, libc::SIGKILL);
            }
            _ = tick.tick(), if !terminated_for_grace && !lost_seen => {
                let left = BootInstant::now().until(lease.deadline());
                if lease.renewal_failing() && left <= args.grace {
                    terminated_for_grace = true;
                    eprintln!(
                        "fencelock: renewals of lock {:?} are failing and the lease ends in {:.1}s; sending SIGTERM to CMD",
                        args.name, left.as_secs_f64()
                    );
                    kill_group(pgid, libc::SIGTERM);
                }
            }
        }
    };
    // Whatever CMD left running in its group must not outlive the lock.
    kill_group(pgid, libc::SIGKILL);
    if lost_seen || lease.is_lost() {
        return exit_code::LOST;
    }
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => code,
            (None, Some(sig)) => exit_code::SIGNAL_BASE + sig,
            (None, None) => exit_code::OWN_ERROR,
        },
        Err(e) => fail(format!("lost track of CMD: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgid_message_is_decimal() {
        let mut buf = [0u8; 32];
        let n = pgid_message(40321, &mut buf);
        assert_eq!(&buf[..n], b"pgid 40321\n");
        let n = pgid_message(7, &mut buf);
        assert_eq!(&buf[..n], b"pgid 7\n");
    }
}
