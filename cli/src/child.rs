//! Running CMD as the leader of its own process group while a lease is held: shared by
//! `fencelock run` and `fencelock elect`.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use fencelock::{BootInstant, Lease, LockName, LockOptions};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::guardian::{Guardian, write_all};
use crate::{UrlArg, exit_code, fail, runtime};

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
        Some(if executable {
            Ok(path.to_path_buf())
        } else {
            Err(Unrunnable::NotExecutable)
        })
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
    Err(if seen_unexecutable {
        Unrunnable::NotExecutable
    } else {
        Unrunnable::NotFound
    })
}

/// What `run` and `elect` settle before any lock work (the URL, the lock name and options,
/// CMD's executable), then the guardian, forked while this process still has one thread, then
/// `body(url, options, program, guardian_fd)` on the command's runtime. Returns the exit code.
pub fn launch<F, Fut>(
    url: &UrlArg,
    name: &str,
    options: LockOptions,
    holder: Option<&String>,
    command: &[OsString],
    body: F,
) -> i32
where
    F: FnOnce(String, LockOptions, PathBuf, i32) -> Fut,
    Fut: Future<Output = i32>,
{
    let url = match crate::url::resolve(url) {
        Ok(url) => url,
        Err(e) => return fail(e),
    };
    if let Err(e) = LockName::new(name) {
        return fail(e);
    }
    let options = match holder {
        Some(text) => options.with_holder(text.clone()),
        None => options,
    };
    if let Err(e) = options.validate() {
        return fail(e);
    }
    let program = match find_program(&command[0]) {
        Ok(p) => p,
        Err(why) => return unrunnable(&command[0], why),
    };
    // Before any thread exists (the runtime and the deadline watchdog start below).
    let guardian = match Guardian::start() {
        Ok(g) => g,
        Err(e) => return fail(format!("cannot start the guardian process: {e}")),
    };
    let code = match runtime() {
        Ok(rt) => rt.block_on(body(url, options, program, guardian.write_fd())),
        Err(e) => fail(format!("cannot start: {e}")),
    };
    guardian.dismiss();
    code
}

/// Says why CMD cannot run, and returns the exit code for it.
fn unrunnable(program: &OsStr, why: Unrunnable) -> i32 {
    match why {
        Unrunnable::NotFound => {
            eprintln!(
                "fencelock: {}: command not found",
                program.to_string_lossy()
            );
            exit_code::NOT_FOUND
        }
        Unrunnable::NotExecutable => {
            eprintln!("fencelock: {}: not executable", program.to_string_lossy());
            exit_code::NOT_EXECUTABLE
        }
    }
}

/// INT, TERM and HUP, caught from before CMD starts until fencelock exits: while CMD runs they
/// are forwarded to its group; otherwise (while waiting for a lock) they end fencelock.
pub struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    pub fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// The next of the three to arrive.
    pub async fn next(&mut self) -> libc::c_int {
        tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
            _ = self.hangup.recv() => libc::SIGHUP,
        }
    }
}

/// What to run, and what it is told.
pub struct ChildSpec<'a> {
    /// CMD and its arguments, as given.
    pub command: &'a [OsString],
    /// CMD's executable, found on PATH.
    pub program: &'a Path,
    pub lock_name: &'a str,
    /// When renewals fail, SIGTERM the group this long before the client deadline.
    pub grace: Duration,
    pub env: Vec<(&'static str, String)>,
}

/// How CMD's run ended.
pub struct Outcome {
    /// CMD's exit code (128+N when killed by signal N), or [`exit_code::LOST`].
    pub code: i32,
    /// The lease was lost and the group was killed for it.
    pub lost: bool,
    /// A signal sent to fencelock was forwarded to CMD's group (fencelock is being stopped).
    pub forwarded: bool,
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

pub fn kill_group(pgid: libc::pid_t, sig: libc::c_int) {
    if pgid > 1 {
        // SAFETY: signalling the process group we created.
        unsafe { libc::kill(-pgid, sig) };
    }
}

/// Runs CMD until it exits, forwarding signals, and kills its group when the lease is lost (or
/// SIGTERMs it `grace` before the client deadline while renewals fail).
pub async fn run_child(
    spec: &ChildSpec<'_>,
    lease: &Lease,
    guardian_fd: i32,
    signals: &mut Signals,
) -> Outcome {
    let own_error = |code| Outcome {
        code,
        lost: false,
        forwarded: false,
    };
    let mut command = std::process::Command::new(spec.program);
    command
        .arg0(&spec.command[0])
        .args(&spec.command[1..])
        .env("FENCELOCK_NAME", spec.lock_name);
    for (key, value) in &spec.env {
        command.env(key, value);
    }
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
    let mut child = match tokio::process::Command::from(command).spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!(
                "fencelock: cannot run {}: {e}",
                spec.command[0].to_string_lossy()
            );
            return own_error(match e.kind() {
                std::io::ErrorKind::NotFound => exit_code::NOT_FOUND,
                std::io::ErrorKind::PermissionDenied => exit_code::NOT_EXECUTABLE,
                _ => exit_code::OWN_ERROR,
            });
        }
    };
    let pgid = child.id().map(|id| id as libc::pid_t).unwrap_or(0);

    let lost = lease.lost_signal();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut terminated_for_grace = false;
    let mut lost_seen = false;
    let mut forwarded = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            sig = signals.next() => {
                forwarded = true;
                kill_group(pgid, sig);
            }
            reason = lost.wait(), if !lost_seen => {
                lost_seen = true;
                eprintln!("fencelock: lock {:?} lost ({reason}); killing CMD's process group", spec.lock_name);
                kill_group(pgid, libc::SIGKILL);
            }
            _ = tick.tick(), if !terminated_for_grace && !lost_seen => {
                let left = BootInstant::now().until(lease.deadline());
                if lease.renewal_failing() && left <= spec.grace {
                    terminated_for_grace = true;
                    eprintln!(
                        "fencelock: renewals of lock {:?} are failing and the lease ends in {:.1}s; sending SIGTERM to CMD",
                        spec.lock_name, left.as_secs_f64()
                    );
                    kill_group(pgid, libc::SIGTERM);
                }
            }
        }
    };
    // Whatever CMD left running in its group must not outlive the lock.
    kill_group(pgid, libc::SIGKILL);
    forget_group(guardian_fd, pgid);
    if lost_seen || lease.is_lost() {
        return Outcome {
            code: exit_code::LOST,
            lost: true,
            forwarded,
        };
    }
    let code = match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => code,
            (None, Some(sig)) => exit_code::SIGNAL_BASE + sig,
            (None, None) => exit_code::OWN_ERROR,
        },
        Err(e) => fail(format!("lost track of CMD: {e}")),
    };
    Outcome {
        code,
        lost: false,
        forwarded,
    }
}

/// Tells the guardian a group is gone, so it never signals that number again once the kernel
/// hands it to somebody else (`fencelock elect` runs CMD many times under one guardian).
fn forget_group(guardian_fd: i32, pgid: libc::pid_t) {
    if pgid > 1 {
        write_all(guardian_fd, format!("gone {pgid}\n").as_bytes());
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
