//! What `fencelock run` and `fencelock elect` share before and around CMD: checking the
//! arguments and CMD's executable, starting the guardian, and the signals fencelock forwards.
//! Running CMD itself is `supervise.rs`.

use std::ffi::{OsStr, OsString};
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use fencelock::{LockName, LockOptions};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::guardian::Guardian;
use crate::terminal::{self, Terminal};
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
/// CMD's executable), then the guardian, started while this process still has one thread, then
/// `body(url, options, program, supervision)` on the command's runtime. Returns the exit code.
pub fn launch<F, Fut>(
    url: &UrlArg,
    name: &str,
    options: LockOptions,
    holder: Option<&String>,
    command: &[OsString],
    body: F,
) -> i32
where
    F: FnOnce(String, LockOptions, PathBuf, Supervision) -> Fut,
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
    // Before any thread exists (the runtime and the deadline watchdog start below): the
    // guardian is forked, and every later thread inherits the blocked SIGTTOU.
    terminal::block_sigttou();
    let guardian = match Guardian::start() {
        Ok(g) => g,
        Err(e) => return fail(format!("cannot start the guardian process: {e}")),
    };
    let supervision = Supervision {
        guardian_fd: guardian.write_fd(),
        terminal: Terminal::foreground(),
    };
    let code = match runtime() {
        Ok(rt) => rt.block_on(body(url, options, program, supervision)),
        Err(e) => fail(format!("cannot start: {e}")),
    };
    guardian.dismiss();
    code
}

/// What watches over CMD besides `fencelock`: the guardian, and the terminal when `fencelock`
/// runs in its foreground.
pub struct Supervision {
    pub guardian_fd: RawFd,
    pub terminal: Option<Terminal>,
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

/// INT, TERM, HUP and QUIT (which ask to stop) and USR1 and USR2 (messages for CMD, as
/// `kill -USR1` to a server asks it to reopen its logs), caught from before CMD starts until
/// fencelock exits: while CMD runs they are forwarded to its group; otherwise (while waiting
/// for a lock) they end fencelock, as their default action would.
pub struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
    quit: Signal,
    user1: Signal,
    user2: Signal,
}

impl Signals {
    pub fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
            user1: signal(SignalKind::user_defined1())?,
            user2: signal(SignalKind::user_defined2())?,
        })
    }

    /// The next to arrive.
    pub async fn next(&mut self) -> libc::c_int {
        tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
            _ = self.hangup.recv() => libc::SIGHUP,
            _ = self.quit.recv() => libc::SIGQUIT,
            _ = self.user1.recv() => libc::SIGUSR1,
            _ = self.user2.recv() => libc::SIGUSR2,
        }
    }

    /// Whether `sig` asks fencelock to stop, rather than carrying a message to CMD.
    pub fn stops(sig: libc::c_int) -> bool {
        !matches!(sig, libc::SIGUSR1 | libc::SIGUSR2)
    }
}
