//! The guardian: a small process that kills CMD's whole process group when the lease's client
//! deadline passes without word from `fencelock`, or when `fencelock` dies. It is what keeps CMD
//! from running past the lease whatever happens to the `fencelock` process: killed alone or
//! with its process group, stopped (Ctrl-Z, SIGSTOP, a debugger), or stuck.
//!
//! So that nothing aimed at `fencelock` reaches it, it is forked before any thread starts and
//! re-executes the same binary in a session of its own (no process group or terminal in common
//! with `fencelock`), under the name `lease-guardian`: `kill -9 -PGID`, `timeout -s KILL`,
//! `killall fencelock`, `pkill -f fencelock` and Ctrl-C or Ctrl-Z in a terminal all miss it.
//!
//! It reads lines from a pipe whose writers are `fencelock` and, between fork and exec, CMD's
//! child (see [`Message`]). `fencelock` writes the lease's client deadline (CLOCK_BOOTTIME)
//! before CMD starts and again as renewals move it: at once when it moves earlier, and when it
//! moved later by more than ttl/10 or ttl/10 after the last write (`supervise.rs`,
//! `guardian_needs`), so the deadline here is never later than the lease's, and at most ttl/10
//! earlier for at most ttl/10. CMD's child writes its process group id before exec, so CMD never
//! runs unknown to the guardian. The guardian:
//! - sends SIGKILL to every live group at the deadline, on a CLOCK_BOOTTIME timer (which, unlike
//!   poll's timeout, counts a suspended machine's sleep), and at once to a group that has no
//!   deadline;
//! - sends SIGTERM (then SIGCONT: a stopped group only queues SIGTERM) at
//!   `deadline - min(grace, ttl/3)`, only when no deadline arrived for more than ttl/3 + 1 s
//!   (`fencelock` itself is then stopped or stuck) and `fencelock` has not sent its own;
//! - on end-of-file without `done` (`fencelock` is gone), kills every live group at once.
//!
//! `fencelock`'s end of the pipe is non-blocking: a stopped guardian never blocks a renewal. A
//! deadline that cannot be written is dropped, and the guardian then kills at the older,
//! earlier deadline: the safe direction.

use std::ffi::{CString, OsString};
use std::io::Read;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::time::Duration;

use fencelock::BootInstant;

/// argv[0] of the re-executed guardian, and its name in `ps`: nothing that matches "fencelock".
const NAME: &str = "lease-guardian";

/// What the guardian is told, one line each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// A new lease: its ttl and the grace before its deadline (nanoseconds).
    Limits { ttl_ns: u64, grace_ns: u64 },
    /// The lease's client deadline, in nanoseconds since boot on CLOCK_BOOTTIME.
    Deadline { boot_ns: u64 },
    /// CMD's process group (written by CMD's child before exec).
    Group { pgid: libc::pid_t },
    /// `fencelock` sent its own grace SIGTERM to the group: the guardian sends none.
    Terminated,
    /// The group was killed and reaped: never signal that number again.
    Gone { pgid: libc::pid_t },
    /// `fencelock` ends normally; no group is left to kill.
    Done,
}

impl Message {
    fn parse(line: &str) -> Option<Message> {
        let mut words = line.split(' ');
        let kind = words.next()?;
        let mut number = || words.next()?.parse::<u64>().ok();
        let pid = |n: u64| libc::pid_t::try_from(n).ok();
        Some(match kind {
            "limits" => Message::Limits {
                ttl_ns: number()?,
                grace_ns: number()?,
            },
            "deadline" => Message::Deadline { boot_ns: number()? },
            "pgid" => Message::Group {
                pgid: pid(number()?)?,
            },
            "terminated" => Message::Terminated,
            "gone" => Message::Gone {
                pgid: pid(number()?)?,
            },
            "done" => Message::Done,
            _ => return None,
        })
    }
}

/// `fencelock`'s side of the guardian.
pub struct Guardian {
    pid: libc::pid_t,
    write_fd: RawFd,
}

impl Guardian {
    /// Starts the guardian. Must run while this process has a single thread.
    pub fn start() -> std::io::Result<Guardian> {
        let exe = CString::new("/proc/self/exe").expect("no NUL");
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe2 fills the two descriptors we pass.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let (read_fd, write_fd) = (fds[0], fds[1]);
        let argv0 = CString::new(NAME).expect("no NUL");
        let argv1 = CString::new(read_fd.to_string()).expect("no NUL");
        // SAFETY: this process has one thread (launch calls us before starting any), so the
        // child may run ordinary code until it execs.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: the child's own descriptors and session; execv replaces it or we _exit.
            unsafe {
                libc::close(write_fd);
                libc::setsid();
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                if null >= 0 {
                    for fd in 0..3 {
                        libc::dup2(null, fd);
                    }
                }
                // The read end must survive exec.
                libc::fcntl(read_fd, libc::F_SETFD, 0);
                let argv = [argv0.as_ptr(), argv1.as_ptr(), std::ptr::null()];
                libc::execv(exe.as_ptr(), argv.as_ptr());
                // No guardian: the parent sees EPIPE on its first write and refuses to run CMD.
                libc::_exit(127);
            }
        }
        // SAFETY: the parent does not read; its writes must never block (a stopped guardian).
        unsafe {
            libc::close(read_fd);
            let flags = libc::fcntl(write_fd, libc::F_GETFL);
            libc::fcntl(write_fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        Ok(Guardian { pid, write_fd })
    }

    /// The descriptor CMD's child writes its process group id into before exec.
    pub fn write_fd(&self) -> RawFd {
        self.write_fd
    }

    /// Tells the guardian it is no longer needed (every group has been dealt with) and reaps it.
    pub fn dismiss(self) {
        tell(self.write_fd, Message::Done);
        // SAFETY: closing our write end and reaping our own child.
        unsafe {
            libc::close(self.write_fd);
            let mut status = 0;
            libc::waitpid(self.pid, &mut status, 0);
        }
    }
}

/// Writes one message without blocking; false when it could not be written whole (the
/// guardian is gone, or stopped with its pipe full).
pub fn tell(fd: RawFd, message: Message) -> bool {
    let mut buf = [0u8; 64];
    let len = format_message(message, &mut buf);
    write_all(fd, &buf[..len])
}

/// Formats a message without allocating: CMD's child calls this between fork and exec, where
/// only async-signal-safe work is allowed (another thread may hold the allocator's lock).
pub fn format_message(message: Message, buf: &mut [u8; 64]) -> usize {
    let mut line = Line { buf, len: 0 };
    match message {
        Message::Limits { ttl_ns, grace_ns } => {
            line.text(b"limits ");
            line.number(ttl_ns);
            line.text(b" ");
            line.number(grace_ns);
        }
        Message::Deadline { boot_ns } => {
            line.text(b"deadline ");
            line.number(boot_ns);
        }
        Message::Group { pgid } => {
            line.text(b"pgid ");
            line.number(pgid.max(0) as u64);
        }
        Message::Terminated => line.text(b"terminated"),
        Message::Gone { pgid } => {
            line.text(b"gone ");
            line.number(pgid.max(0) as u64);
        }
        Message::Done => line.text(b"done"),
    }
    line.text(b"\n");
    line.len
}

/// A message being written into a stack buffer (no allocation: see [`format_message`]).
struct Line<'a> {
    buf: &'a mut [u8; 64],
    len: usize,
}

impl Line<'_> {
    fn text(&mut self, bytes: &[u8]) {
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    fn number(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut start = digits.len();
        loop {
            start -= 1;
            digits[start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.text(&digits[start..]);
    }
}

/// Writes `bytes` with plain write(2): async-signal-safe, so usable between fork and exec. A
/// message is far below PIPE_BUF, so the kernel writes it whole or not at all.
pub fn write_all(fd: RawFd, bytes: &[u8]) -> bool {
    loop {
        // SAFETY: writing from a live slice to a descriptor we own.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n >= 0 {
            return n as usize == bytes.len();
        }
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return false;
        }
    }
}

/// When `main` was started as the guardian (`lease-guardian FD`, by [`Guardian::start`]), the
/// pipe's descriptor.
pub fn entry(args: &[OsString]) -> Option<RawFd> {
    if args.len() != 2 || args[0] != NAME {
        return None;
    }
    let fd: RawFd = String::from_utf8(args[1].clone().into_vec())
        .ok()?
        .parse()
        .ok()?;
    // SAFETY: fstat into a struct we own; the descriptor must be an inherited pipe.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    let is_pipe = unsafe { libc::fstat(fd, &mut stat) } == 0
        && (stat.st_mode & libc::S_IFMT) == libc::S_IFIFO;
    is_pipe.then_some(fd)
}

/// What the guardian knows and decides; kept apart from the system calls so it can be tested.
#[derive(Debug, Default)]
struct Watch {
    /// Groups that are running (told by `pgid`, not yet `gone` or killed).
    live: Vec<libc::pid_t>,
    deadline: Option<Duration>,
    /// When the last deadline arrived (since boot).
    last_update: Duration,
    ttl: Duration,
    grace: Duration,
    /// A SIGTERM was sent for this lease, by `fencelock` or by the guardian.
    terminated: bool,
}

/// What the guardian must do now.
#[derive(Debug, PartialEq, Eq)]
enum Action {
    Kill(Vec<libc::pid_t>),
    Terminate(Vec<libc::pid_t>),
    Nothing,
}

impl Watch {
    fn hear(&mut self, message: Message, now: Duration) {
        match message {
            Message::Limits { ttl_ns, grace_ns } => {
                self.ttl = Duration::from_nanos(ttl_ns);
                self.grace = Duration::from_nanos(grace_ns);
                self.terminated = false;
            }
            Message::Deadline { boot_ns } => {
                self.deadline = Some(Duration::from_nanos(boot_ns));
                self.last_update = now;
            }
            Message::Group { pgid } => {
                if pgid > 1 {
                    self.live.push(pgid);
                }
            }
            Message::Terminated => self.terminated = true,
            Message::Gone { pgid } => self.live.retain(|&live| live != pgid),
            Message::Done => {}
        }
    }

    /// When `fencelock` has been silent for long enough to be presumed stopped or stuck.
    fn silent_since(&self) -> Duration {
        self.last_update + self.ttl / 3 + Duration::from_secs(1)
    }

    /// The guardian's SIGTERM time, if one is still due for this lease.
    fn terminate_at(&self) -> Option<Duration> {
        let deadline = self.deadline?;
        if self.terminated {
            return None;
        }
        let before = deadline.saturating_sub(self.grace.min(self.ttl / 3));
        Some(before.max(self.silent_since())).filter(|&at| at < deadline)
    }

    /// What is due at `now`, with the state updated as if it was done.
    fn due(&mut self, now: Duration) -> Action {
        if self.live.is_empty() {
            return Action::Nothing;
        }
        match self.deadline {
            Some(deadline) if now < deadline => {}
            // Past the deadline, or a group with no deadline at all: kill.
            _ => return Action::Kill(std::mem::take(&mut self.live)),
        }
        match self.terminate_at() {
            Some(at) if now >= at => {
                self.terminated = true;
                Action::Terminate(self.live.clone())
            }
            _ => Action::Nothing,
        }
    }

    /// When to look again (since boot), or never while no group is live.
    fn next_wake(&self) -> Option<Duration> {
        if self.live.is_empty() {
            return None;
        }
        let deadline = self.deadline?;
        Some(self.terminate_at().map_or(deadline, |at| at.min(deadline)))
    }
}

fn now() -> Duration {
    BootInstant::now().since_boot()
}

fn signal_groups(groups: &[libc::pid_t], signals: &[libc::c_int]) {
    for &pgid in groups {
        for &sig in signals {
            // SAFETY: signalling a process group we were told about and not told is gone.
            unsafe { libc::kill(-pgid, sig) };
        }
    }
}

/// A timer on CLOCK_BOOTTIME, armed at absolute instants since boot.
struct BootTimer(RawFd);

impl BootTimer {
    fn new() -> std::io::Result<BootTimer> {
        // SAFETY: creating a descriptor we own.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_BOOTTIME, libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(BootTimer(fd))
    }

    /// Arms the timer at `at` (since boot), or disarms it.
    fn arm(&self, at: Option<Duration>) {
        // A zero value disarms a timerfd: an instant already past is given as 1 ns.
        let at = at.map(|at| at.max(Duration::from_nanos(1)));
        let value = at.map_or(
            libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            |at| libc::timespec {
                tv_sec: at.as_secs() as libc::time_t,
                tv_nsec: at.subsec_nanos() as libc::c_long,
            },
        );
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: value,
        };
        // SAFETY: setting our own timer from a struct we own.
        unsafe {
            libc::timerfd_settime(self.0, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut())
        };
    }

    fn clear(&self) {
        let mut expirations = [0u8; 8];
        // SAFETY: reading the expiration count into a buffer we own.
        unsafe { libc::read(self.0, expirations.as_mut_ptr().cast(), 8) };
    }
}

/// The guardian's whole life, after [`entry`]: returns only by exiting.
pub fn guard(read_fd: RawFd) -> ! {
    // SAFETY: naming and setting dispositions of our own single-threaded process.
    unsafe {
        let name = CString::new(NAME).expect("no NUL");
        libc::prctl(libc::PR_SET_NAME, name.as_ptr());
        for sig in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGPIPE,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    // SAFETY: we own read_fd from here on.
    let mut pipe = unsafe { std::fs::File::from_raw_fd(read_fd) };
    let timer = BootTimer::new().ok();
    let mut watch = Watch::default();
    let mut pending = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        let mut polled = [
            libc::pollfd {
                fd: read_fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: timer.as_ref().map_or(-1, |t| t.0),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // Without a BOOTTIME timer (a very old kernel), poll's own timeout, capped so that a
        // suspended machine's sleep is noticed within a second of waking.
        let timeout_ms = match (&timer, watch.next_wake()) {
            (Some(_), _) | (None, None) => -1,
            (None, Some(at)) => at.saturating_sub(now()).as_millis().clamp(1, 1000) as i32,
        };
        // SAFETY: polling descriptors we own, through an array we own.
        let ready = unsafe { libc::poll(polled.as_mut_ptr(), 2, timeout_ms) };
        if ready < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break;
        }
        if polled[1].revents != 0
            && let Some(timer) = &timer
        {
            timer.clear();
        }
        if polled[0].revents != 0 {
            match pipe.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
            }
            while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
                match Message::parse(&line) {
                    // SAFETY: leaving without running destructors; nothing is left to kill.
                    Some(Message::Done) => unsafe { libc::_exit(0) },
                    Some(message) => watch.hear(message, now()),
                    None => {}
                }
            }
        }
        match watch.due(now()) {
            Action::Kill(groups) => signal_groups(&groups, &[libc::SIGKILL]),
            Action::Terminate(groups) => signal_groups(&groups, &[libc::SIGTERM, libc::SIGCONT]),
            Action::Nothing => {}
        }
        if let Some(timer) = &timer {
            timer.arm(watch.next_wake());
        }
    }
    // End of file without `done`: fencelock is gone.
    signal_groups(&watch.live, &[libc::SIGKILL]);
    // SAFETY: leaving without running the parent's atexit handlers or destructors.
    unsafe { libc::_exit(0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn text(message: Message) -> String {
        let mut buf = [0u8; 64];
        let n = format_message(message, &mut buf);
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn messages_round_trip() {
        for message in [
            Message::Limits {
                ttl_ns: 30_000_000_000,
                grace_ns: 5_000_000_000,
            },
            Message::Deadline { boot_ns: u64::MAX },
            Message::Group { pgid: 40321 },
            Message::Group { pgid: 7 },
            Message::Terminated,
            Message::Gone { pgid: 40321 },
            Message::Done,
        ] {
            let line = text(message);
            assert!(line.ends_with('\n'), "{line:?}");
            assert_eq!(Message::parse(line.trim_end()), Some(message), "{line:?}");
        }
        assert_eq!(text(Message::Group { pgid: 40321 }), "pgid 40321\n");
        assert_eq!(Message::parse("pgid -5"), None);
        assert_eq!(Message::parse("deadline"), None);
    }

    fn watching(ttl: Duration, grace: Duration, deadline: Duration, now: Duration) -> Watch {
        let mut watch = Watch::default();
        watch.hear(
            Message::Limits {
                ttl_ns: ttl.as_nanos() as u64,
                grace_ns: grace.as_nanos() as u64,
            },
            now,
        );
        watch.hear(
            Message::Deadline {
                boot_ns: deadline.as_nanos() as u64,
            },
            now,
        );
        watch.hear(Message::Group { pgid: 100 }, now);
        watch
    }

    #[test]
    fn kills_at_the_deadline_and_a_group_without_one_at_once() {
        let mut watch = watching(30 * S, 5 * S, 130 * S, 100 * S);
        assert_eq!(watch.due(110 * S), Action::Nothing);
        assert_eq!(watch.due(130 * S), Action::Kill(vec![100]));
        assert_eq!(watch.due(131 * S), Action::Nothing, "killed once");

        let mut no_deadline = Watch::default();
        no_deadline.hear(Message::Group { pgid: 7 }, S);
        assert_eq!(no_deadline.due(S), Action::Kill(vec![7]));
    }

    #[test]
    fn terminates_only_when_fencelock_went_silent_and_not_twice() {
        // ttl 30 s, renewed at 100 s: deadline 130 s. Silent after 100 + 10 + 1 s; SIGTERM at
        // 130 - min(5, 10) = 125 s.
        let mut watch = watching(30 * S, 5 * S, 130 * S, 100 * S);
        assert_eq!(watch.next_wake(), Some(125 * S));
        assert_eq!(watch.due(124 * S), Action::Nothing);
        assert_eq!(watch.due(125 * S), Action::Terminate(vec![100]));
        assert_eq!(watch.due(126 * S), Action::Nothing, "one SIGTERM per lease");
        assert_eq!(watch.next_wake(), Some(130 * S));

        // A renewal that keeps arriving (every ttl/3) means fencelock runs: no SIGTERM.
        let mut renewing = watching(30 * S, 5 * S, 130 * S, 100 * S);
        renewing.hear(
            Message::Deadline {
                boot_ns: (140 * S).as_nanos() as u64,
            },
            110 * S,
        );
        assert_eq!(renewing.due(125 * S), Action::Nothing);

        // Short ttl: the silence rule wins over the grace (ttl 3 s: silent after 2 s).
        let short = watching(3 * S, 5 * S, 103 * S, 100 * S);
        assert_eq!(short.next_wake(), Some(102 * S));

        // fencelock's own grace SIGTERM: none from the guardian.
        let mut told = watching(30 * S, 5 * S, 130 * S, 100 * S);
        told.hear(Message::Terminated, 120 * S);
        assert_eq!(told.due(126 * S), Action::Nothing);
        assert_eq!(told.next_wake(), Some(130 * S));
    }

    #[test]
    fn a_gone_group_is_never_signalled() {
        let mut watch = watching(30 * S, 5 * S, 130 * S, 100 * S);
        watch.hear(Message::Gone { pgid: 100 }, 120 * S);
        assert_eq!(watch.due(200 * S), Action::Nothing);
        assert_eq!(watch.next_wake(), None);
    }
}
