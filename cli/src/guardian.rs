//! The guardian: a small process, forked before any thread starts, that kills CMD's whole
//! process group if the `fencelock` process dies, so even `kill -9` of `fencelock` never
//! leaves CMD or its children running without the lock.
//!
//! It holds the read end of a pipe whose only writers are `fencelock` itself and, between
//! fork and exec, CMD's child process. CMD's child writes its own pid (= its new process
//! group id) into the pipe *before* exec, so there is no window in which CMD runs and the
//! guardian does not know its group. When the pipe reaches end-of-file without a
//! "done" message, `fencelock` is gone: the guardian sends SIGKILL to the group.

use std::io::Read;
use std::os::fd::{FromRawFd, RawFd};

pub struct Guardian {
    pid: libc::pid_t,
    write_fd: RawFd,
}

impl Guardian {
    /// Forks the guardian. Must run while this process has a single thread.
    pub fn start() -> std::io::Result<Guardian> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe2 fills the two descriptors we pass.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let (read_fd, write_fd) = (fds[0], fds[1]);
        // SAFETY: this process has one thread (main calls us before starting any), so the
        // child may run ordinary code.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: closing our copy of the write end so EOF means "fencelock is gone".
            unsafe { libc::close(write_fd) };
            guard(read_fd);
        }
        // SAFETY: the parent does not read.
        unsafe { libc::close(read_fd) };
        Ok(Guardian { pid, write_fd })
    }

    /// The descriptor CMD's child writes its process group id into before exec.
    pub fn write_fd(&self) -> RawFd {
        self.write_fd
    }

    /// Tells the guardian it is no longer needed (the group has been dealt with) and reaps it.
    pub fn dismiss(self) {
        write_all(self.write_fd, b"done\n");
        // SAFETY: closing our write end and reaping our own child.
        unsafe {
            libc::close(self.write_fd);
            let mut status = 0;
            libc::waitpid(self.pid, &mut status, 0);
        }
    }
}

/// Writes `bytes` with plain write(2): async-signal-safe, so usable between fork and exec.
pub fn write_all(fd: RawFd, bytes: &[u8]) -> bool {
    let mut written = 0;
    while written < bytes.len() {
        // SAFETY: writing from a live slice to a descriptor we own.
        let n = unsafe { libc::write(fd, bytes[written..].as_ptr().cast(), bytes.len() - written) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
        written += n as usize;
    }
    true
}

/// The guardian's whole life: read group ids ("pgid N" when CMD starts, "gone N" once it is
/// reaped) until EOF, then kill the live ones unless dismissed.
fn guard(read_fd: RawFd) -> ! {
    // Signals meant for fencelock (Ctrl-C reaches the whole foreground group) must not end
    // the guardian: it has to outlive fencelock.
    // SAFETY: setting dispositions in our own single-threaded process.
    unsafe {
        for sig in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGPIPE,
            libc::SIGUSR1,
            libc::SIGUSR2,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    // SAFETY: we own read_fd from here on.
    let mut pipe = unsafe { std::fs::File::from_raw_fd(read_fd) };
    let mut text = String::new();
    let mut buf = [0u8; 256];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => text.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    if !text.lines().any(|l| l == "done") {
        let number = |line: &str, prefix: &str| {
            line.strip_prefix(prefix)
                .and_then(|p| p.parse::<libc::pid_t>().ok())
        };
        let mut live: Vec<libc::pid_t> = Vec::new();
        for line in text.lines() {
            if let Some(pgid) = number(line, "pgid ") {
                live.push(pgid);
            } else if let Some(gone) = number(line, "gone ") {
                live.retain(|&pgid| pgid != gone);
            }
        }
        for pgid in live.into_iter().filter(|&pgid| pgid > 1) {
            // SAFETY: signalling a process group we were told about and not told is gone.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
    // SAFETY: leaving without running the parent's atexit handlers or destructors.
    unsafe { libc::_exit(0) }
}
