//! The controlling terminal, handed to CMD the way a shell hands it to a job.
//!
//! When `fencelock` runs in the terminal's foreground, CMD gets the foreground (`tcsetpgrp`), so
//! it can read the terminal and Ctrl-C or Ctrl-Z reach it, once, as they would without
//! `fencelock`. When CMD is suspended, `fencelock` takes the terminal back and suspends its own
//! job, so the shell sees the job stopped; when the shell resumes the job, `fencelock` gives the
//! terminal to CMD again and continues it. In the background, or without a terminal, nothing here
//! applies and CMD stays in a background group.
//!
//! `tcsetpgrp` from a process that is not in the foreground raises SIGTTOU: SIGTTOU is blocked in
//! `fencelock` for its whole life ([`block_sigttou`], before any thread starts), which also keeps
//! a background `fencelock` writing to a terminal under `stty tostop` from being stopped before
//! it can kill and release. CMD's child blocks it around its own `tcsetpgrp` and then restores
//! the default dispositions of the job-control signals (ignored ones survive exec).

use std::os::fd::RawFd;

/// Blocks SIGTTOU in the calling thread; threads started afterwards inherit it. Called once,
/// while `fencelock` has a single thread.
pub fn block_sigttou() {
    // SAFETY: changing the calling thread's signal mask through sets we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// The controlling terminal while `fencelock`'s process group is its foreground group.
pub struct Terminal {
    fd: RawFd,
    pgrp: libc::pid_t,
}

impl Terminal {
    /// The terminal, when `fencelock` runs in its foreground; `None` in the background, without
    /// a controlling terminal, or in an orphaned group (where the kernel drops Ctrl-Z).
    pub fn foreground() -> Option<Terminal> {
        // SAFETY: opening the controlling terminal into a descriptor we own.
        let fd = unsafe {
            libc::open(
                c"/dev/tty".as_ptr(),
                libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOCTTY,
            )
        };
        if fd < 0 {
            return None;
        }
        // SAFETY: asking for our own process group.
        let pgrp = unsafe { libc::getpgrp() };
        let terminal = Terminal { fd, pgrp };
        terminal.is_ours().then_some(terminal)
    }

    /// The descriptor CMD's child calls `tcsetpgrp` on before exec.
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// Whether `fencelock`'s group has the terminal's foreground (the shell gave it back on `fg`).
    pub fn is_ours(&self) -> bool {
        // SAFETY: a query on a descriptor we own.
        unsafe { libc::tcgetpgrp(self.fd) == self.pgrp }
    }

    /// Gives the terminal's foreground to `pgid` (CMD's group). SIGTTOU is blocked.
    pub fn give_to(&self, pgid: libc::pid_t) {
        // SAFETY: as above; failure leaves the foreground where it was.
        unsafe { libc::tcsetpgrp(self.fd, pgid) };
    }

    /// Takes the foreground back for `fencelock`'s group, if CMD's group (or nobody) has it.
    pub fn take_back(&self, from: libc::pid_t) {
        // SAFETY: as above.
        unsafe {
            let now = libc::tcgetpgrp(self.fd);
            if now == from || now < 0 {
                libc::tcsetpgrp(self.fd, self.pgrp);
            }
        }
    }

    /// Suspends `fencelock`'s own job (its process group), as the shell's job: returns once the
    /// job is continued (`fg` or `bg`).
    pub fn suspend_own_job(&self) {
        // SAFETY: signalling our own process group; the stop is delivered before kill returns.
        unsafe { libc::kill(0, libc::SIGTSTP) };
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        // SAFETY: closing the descriptor we opened.
        unsafe { libc::close(self.fd) };
    }
}

/// Between fork and exec in CMD's child, with `fencelock`'s terminal: makes CMD's new group the
/// foreground. Async-signal-safe: SIGTTOU is blocked around `tcsetpgrp` (Rust's `Command` has
/// cleared the mask by now) and then restored.
///
/// # Safety
/// Only between fork and exec.
pub unsafe fn child_take_foreground(tty_fd: RawFd) {
    // SAFETY: the caller is CMD's child between fork and exec; these calls are
    // async-signal-safe and touch only that process.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        libc::tcsetpgrp(tty_fd, libc::getpid());
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}

/// Between fork and exec in CMD's child: the job-control signals get their default action, as a
/// shell gives its jobs (an ignored disposition would survive exec).
///
/// # Safety
/// Only between fork and exec.
pub unsafe fn child_default_job_signals() {
    // SAFETY: as for `child_take_foreground`.
    unsafe {
        for sig in [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU] {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
}
