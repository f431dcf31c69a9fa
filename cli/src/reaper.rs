//! Waiting for CMD: the one place that calls `waitid` on it, on a thread of its own, so that
//! stops and continues are seen too (`tokio::process::Child::wait` reports neither, and a second
//! waiter on the same child could steal its exit status).

use tokio::sync::mpsc;

/// What happened to CMD (its process, the leader of its group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildEvent {
    /// Stopped by this signal (SIGTSTP, SIGTTIN, SIGTTOU, SIGSTOP).
    Stopped(libc::c_int),
    Continued,
    /// Exited with this code.
    Exited(i32),
    /// Killed by this signal.
    Killed(libc::c_int),
    /// `waitid` failed: CMD can no longer be watched.
    Lost(i32),
}

/// Starts waiting for `pid`; the events arrive on the returned channel, the last one being
/// `Exited`, `Killed` or `Lost`.
pub fn watch(pid: libc::pid_t) -> std::io::Result<mpsc::UnboundedReceiver<ChildEvent>> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("cmd-reaper".into())
        .spawn(move || {
            loop {
                let event = wait_once(pid);
                let last = !matches!(event, ChildEvent::Stopped(_) | ChildEvent::Continued);
                if tx.send(event).is_err() || last {
                    return;
                }
            }
        })?;
    Ok(rx)
}

fn wait_once(pid: libc::pid_t) -> ChildEvent {
    loop {
        // SAFETY: waitid fills the siginfo we own; only this thread waits for `pid`.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WSTOPPED | libc::WCONTINUED,
            )
        };
        if rc != 0 {
            let error = std::io::Error::last_os_error();
            if error.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return ChildEvent::Lost(error.raw_os_error().unwrap_or(0));
        }
        // SAFETY: for a child, waitid set si_status (the exit code or the signal).
        let status = unsafe { info.si_status() };
        return match info.si_code {
            libc::CLD_EXITED => ChildEvent::Exited(status),
            libc::CLD_KILLED | libc::CLD_DUMPED => ChildEvent::Killed(status),
            libc::CLD_STOPPED | libc::CLD_TRAPPED => ChildEvent::Stopped(status),
            libc::CLD_CONTINUED => ChildEvent::Continued,
            _ => continue,
        };
    }
}
