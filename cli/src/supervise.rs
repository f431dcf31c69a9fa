//! Running CMD while a lease is held, shared by `fencelock run` and `fencelock elect`: CMD and
//! every process of its group run only while the lease is held.
//!
//! - CMD is spawned only if the lease is still held at that instant, as the leader of a new
//!   process group that the guardian learns of before CMD runs; the guardian also has the
//!   lease's deadline first (and a new one as renewals move it: [`guardian_needs`]), so it
//!   kills the group at the deadline even if `fencelock` is stopped, stuck or killed
//!   (`guardian.rs`).
//! - On a loss the SIGKILL is sent in the lost signal's callback, on whichever thread detects
//!   the loss, before anything is logged: a stderr nobody reads never delays it.
//! - When renewals keep failing, the group gets SIGTERM (and SIGCONT) `grace` before the
//!   deadline.
//! - A group stopped for longer than the ttl (SIGTTIN from a terminal it cannot read, SIGSTOP)
//!   is killed and the lease released: a job waiting for a terminal never holds a lock forever.
//! - In a terminal's foreground, CMD gets the terminal, and Ctrl-Z suspends the whole job
//!   (`terminal.rs`).
//! - When the group cannot be killed (a member that became another user, one that left the
//!   group), `fencelock` says so and treats the lease as lost (exit 122): never silently.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

use fencelock::{BootInstant, Lease};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::child::{Signals, Supervision};
use crate::guardian::{self, Message};
use crate::reaper::{self, ChildEvent};
use crate::terminal::{self, Terminal};
use crate::{exit_code, fail};

/// How often the supervisor looks at the lease (deadline to pass on, failing renewals, a group
/// stopped for too long).
const TICK: Duration = Duration::from_millis(100);
/// How long a killed group may take to disappear before it counts as unkillable.
const KILL_CONFIRM: Duration = Duration::from_secs(2);

/// Every variable `run` and `elect` hand a token to CMD in.
const TOKEN_VARIABLES: [&str; 4] = [
    "FENCELOCK_TOKEN",
    "FENCELOCK_PERMIT_TOKEN",
    "FENCELOCK_READ_TOKEN",
    "FENCELOCK_TERM",
];

/// What to run, and what it is told.
pub struct ChildSpec<'a> {
    /// CMD and its arguments, as given.
    pub command: &'a [OsString],
    /// CMD's executable, found on PATH.
    pub program: &'a Path,
    pub lock_name: &'a str,
    /// The lease's real life ([`fencelock::Lease::ttl`]: on ZooKeeper the session timeout).
    pub ttl: Duration,
    /// When renewals fail, SIGTERM the group this long before the client deadline (below ttl/3:
    /// see [`effective_grace`]).
    pub grace: Duration,
    pub env: Vec<(&'static str, String)>,
}

/// How CMD's run ended.
pub struct Outcome {
    /// CMD's exit code (128+N when killed by signal N), or [`exit_code::LOST`].
    pub code: i32,
    /// The lease was lost (or CMD's group could not be kept within it) and the group was killed.
    pub lost: bool,
    /// A signal sent to fencelock was forwarded to CMD's group (fencelock is being stopped).
    pub forwarded: bool,
}

impl Outcome {
    fn lost(forwarded: bool) -> Outcome {
        Outcome {
            code: exit_code::LOST,
            lost: true,
            forwarded,
        }
    }
}

/// The grace actually used: below ttl/3, so that one failed renewal (they run every ttl/3)
/// never ends CMD. A larger one is clamped to ttl/4, with a warning when it was asked for.
pub fn effective_grace(asked: Option<Duration>, ttl: Duration) -> Duration {
    const DEFAULT: Duration = Duration::from_secs(5);
    let grace = asked.unwrap_or(DEFAULT);
    if grace < ttl / 3 {
        return grace;
    }
    let clamped = ttl / 4;
    if asked.is_some() {
        eprintln!(
            "fencelock: --grace {grace:?} is not below ttl/3 ({:?}); using {clamped:?}",
            ttl / 3
        );
    }
    clamped
}

/// How a process group is signalled: [`signal_group`], or a recorder in tests.
type SignalGroup = fn(libc::pid_t, libc::c_int) -> Result<(), std::io::Error>;

/// Sends `sig` to a process group; the error when not one member could be signalled.
fn signal_group(pgid: libc::pid_t, sig: libc::c_int) -> Result<(), std::io::Error> {
    if pgid <= 1 {
        return Ok(());
    }
    // SAFETY: signalling the process group we created.
    if unsafe { libc::kill(-pgid, sig) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// CMD's process group as the lease's lost callback sees it: that callback may run on any
/// thread, at any time until the lease is released, so the group is shared, and forgotten once
/// it is confirmed gone: from then on its number may name another process group.
struct KillOnLoss {
    /// CMD's process group id; 0 before CMD exists.
    group: AtomicI32,
    /// A member could not be signalled (EPERM: it became another user).
    unkillable: AtomicBool,
    signal: SignalGroup,
}

impl KillOnLoss {
    fn new(signal: SignalGroup) -> KillOnLoss {
        KillOnLoss {
            group: AtomicI32::new(0),
            unkillable: AtomicBool::new(false),
            signal,
        }
    }

    /// Kills the group on `lease`'s loss, from the thread that detects it.
    fn arm(self: &Arc<Self>, lease: &Lease) {
        let this = self.clone();
        lease.lost_signal().on_lost(move |_| this.kill());
    }

    fn aim_at(&self, pgid: libc::pid_t) {
        self.group.store(pgid, Ordering::Release);
    }

    /// SIGKILL to the group, while there is one to kill.
    fn kill(&self) {
        let pgid = self.group.load(Ordering::Acquire);
        if pgid == 0 {
            return;
        }
        if let Err(e) = (self.signal)(pgid, libc::SIGKILL)
            && e.raw_os_error() == Some(libc::EPERM)
        {
            self.unkillable.store(true, Ordering::Release);
        }
    }

    /// Whether any process is left in the group (zombies included).
    fn group_exists(&self, pgid: libc::pid_t) -> bool {
        match (self.signal)(pgid, 0) {
            Ok(()) => true,
            Err(e) => e.raw_os_error() != Some(libc::ESRCH),
        }
    }

    /// Kills the group and waits (at most [`KILL_CONFIRM`]) until it is empty, then disarms the
    /// kill on loss: false when some of it survives (a member that became another user: EPERM).
    async fn kill_and_confirm(&self) -> bool {
        let pgid = self.group.load(Ordering::Acquire);
        let started = BootInstant::now();
        loop {
            let _ = (self.signal)(pgid, libc::SIGKILL);
            if !self.group_exists(pgid) {
                self.group.store(0, Ordering::Release);
                return true;
            }
            if started.elapsed() >= KILL_CONFIRM {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn unkillable(&self) -> bool {
        self.unkillable.load(Ordering::Acquire)
    }
}

/// The deadline the guardian has, and when it was told.
#[derive(Debug, Clone, Copy)]
struct ToldDeadline {
    deadline: BootInstant,
    at: BootInstant,
}

/// Whether the guardian, which was last told `told`, must be told the lease's `deadline` at
/// `now`.
///
/// The guardian kills at the deadline it has, and sends SIGTERM `min(grace, ttl/3)` before it
/// once no deadline came for ttl/3 + 1 s (`guardian.rs`). A deadline later than the lease's
/// would let CMD outlive the lease, so one moving earlier is told at once. One earlier than the
/// lease's only makes the guardian act early, so a deadline moving later (ZooKeeper's heartbeat
/// can move it every few hundred milliseconds) waits until it moved by more than ttl/10, or until
/// the last one was told ttl/10 ago: the guardian's deadline is never later than the lease's,
/// and at most ttl/10 earlier for at most ttl/10. The second rule is for a deadline that stops
/// moving (a partition): it reaches the guardian long before the SIGTERM is due, which then
/// still comes `min(grace, ttl/3)` before the lease's deadline, not ttl/10 sooner. A renewal
/// every ttl/3 (every other backend) is told at once.
fn guardian_needs(
    told: ToldDeadline,
    deadline: BootInstant,
    now: BootInstant,
    ttl: Duration,
) -> bool {
    let slack = ttl / 10;
    deadline < told.deadline
        || told.deadline.until(deadline) > slack
        || (deadline != told.deadline && told.at.until(now) > slack)
}

/// Runs CMD until it exits, and keeps it within the lease (the module's doc).
pub async fn run_child(
    spec: &ChildSpec<'_>,
    lease: &Lease,
    supervision: &Supervision,
    signals: &mut Signals,
) -> Outcome {
    let guardian_fd = supervision.guardian_fd;
    let tell = |message| guardian::tell(guardian_fd, message);
    // The guardian knows the deadline before CMD exists; without a guardian, no CMD.
    let mut told_deadline = ToldDeadline {
        deadline: lease.deadline(),
        at: BootInstant::now(),
    };
    let told = tell(Message::Limits {
        ttl_ns: spec.ttl.as_nanos() as u64,
        grace_ns: spec.grace.as_nanos() as u64,
    }) && tell(Message::Deadline {
        boot_ns: told_deadline.deadline.since_boot().as_nanos() as u64,
    });
    if !told {
        return Outcome {
            code: fail("the guardian process is gone; not starting CMD"),
            lost: false,
            forwarded: false,
        };
    }
    if let Err(e) = lease.ensure_held() {
        eprintln!("fencelock: lock {:?} {e}; not starting CMD", spec.lock_name);
        return Outcome::lost(false);
    }

    // The synchronous kill on loss: armed before CMD exists, pointed at its group once known.
    let kill_on_loss = Arc::new(KillOnLoss::new(signal_group));
    kill_on_loss.arm(lease);

    let foreground_tty = supervision
        .terminal
        .as_ref()
        .filter(|t| t.is_ours())
        .map(Terminal::fd);
    let mut command = std::process::Command::new(spec.program);
    command
        .arg0(&spec.command[0])
        .args(&spec.command[1..])
        .env("FENCELOCK_NAME", spec.lock_name);
    // An outer fencelock's token would sit next to this FENCELOCK_NAME as if it were this lock's
    // (a mutex token beside a permit, say, that CMD could fence with).
    for key in TOKEN_VARIABLES {
        command.env_remove(key);
    }
    for (key, value) in &spec.env {
        command.env(key, value);
    }
    // SAFETY: the closure only calls async-signal-safe functions (setpgid, getpid, signal,
    // sigprocmask, tcsetpgrp, write) and formats into a stack buffer.
    unsafe {
        command.pre_exec(move || {
            if libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(tty) = foreground_tty {
                terminal::child_take_foreground(tty);
            }
            terminal::child_default_job_signals();
            if !guardian::tell(
                guardian_fd,
                Message::Group {
                    pgid: libc::getpid(),
                },
            ) {
                // No allocation between fork and exec (other threads may hold malloc's lock):
                // an error from a raw errno, which the parent names below.
                return Err(std::io::Error::from_raw_os_error(libc::EPIPE));
            }
            Ok(())
        });
    }
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let why = if e.raw_os_error() == Some(libc::EPIPE) {
                "the guardian process is gone, so CMD could not be watched".to_string()
            } else {
                e.to_string()
            };
            eprintln!(
                "fencelock: cannot run {}: {why}",
                spec.command[0].to_string_lossy()
            );
            return Outcome {
                code: match e.kind() {
                    std::io::ErrorKind::NotFound => exit_code::NOT_FOUND,
                    std::io::ErrorKind::PermissionDenied => exit_code::NOT_EXECUTABLE,
                    _ => exit_code::OWN_ERROR,
                },
                lost: false,
                forwarded: false,
            };
        }
    };
    let pgid = child.id() as libc::pid_t;
    // Never waited on through `child`: the reaper owns CMD's waiting.
    drop(child);
    kill_on_loss.aim_at(pgid);
    if lease.is_lost() {
        kill_on_loss.kill();
    }
    if let (Some(terminal), Some(_)) = (&supervision.terminal, foreground_tty) {
        // As a shell does, from both sides: whoever runs first, CMD has the terminal.
        terminal.give_to(pgid);
    }
    let events = match reaper::watch(pgid) {
        Ok(events) => events,
        Err(e) => {
            let _ = signal_group(pgid, libc::SIGKILL);
            return Outcome {
                code: fail(format!("cannot watch CMD: {e}")),
                lost: false,
                forwarded: false,
            };
        }
    };

    let mut run = Supervisor {
        spec,
        lease,
        supervision,
        pgid,
        told_deadline: &mut told_deadline,
        kill_on_loss: &kill_on_loss,
    };
    let ended = run.until_exit(events, signals).await;
    if !ended.lost
        && let Some(reason) = lease.lost_signal().reason()
    {
        eprintln!(
            "fencelock: lock {:?} lost ({reason}) while CMD ran; CMD's process group was killed",
            spec.lock_name
        );
    }

    // Whatever CMD left running in its group must not outlive the lock.
    let killed = kill_on_loss.kill_and_confirm().await;
    if let Some(terminal) = &supervision.terminal {
        terminal.take_back(pgid);
    }
    tell(Message::Gone { pgid });
    if !killed || kill_on_loss.unkillable() {
        eprintln!(
            "fencelock: CMD's process group {pgid} could not be killed (a member runs as \
             another user?); treating lock {:?} as lost",
            spec.lock_name
        );
        return Outcome::lost(ended.forwarded);
    }
    if ended.lost || lease.is_lost() {
        return Outcome::lost(ended.forwarded);
    }
    Outcome {
        code: ended.code,
        lost: false,
        forwarded: ended.forwarded,
    }
}

/// The state of one CMD's run, between spawn and exit.
struct Supervisor<'a, 'b> {
    spec: &'a ChildSpec<'b>,
    lease: &'a Lease,
    supervision: &'a Supervision,
    pgid: libc::pid_t,
    told_deadline: &'a mut ToldDeadline,
    kill_on_loss: &'a KillOnLoss,
}

impl Supervisor<'_, '_> {
    async fn until_exit(
        &mut self,
        mut events: UnboundedReceiver<ChildEvent>,
        signals: &mut Signals,
    ) -> Outcome {
        let lost = self.lease.lost_signal();
        let mut tick = tokio::time::interval(TICK);
        let mut terminated_for_grace = false;
        let mut lost_seen = false;
        let mut forwarded = false;
        let mut stopped_since: Option<BootInstant> = None;
        let code = loop {
            tokio::select! {
                event = events.recv() => match event {
                    Some(ChildEvent::Exited(code)) => break code,
                    Some(ChildEvent::Killed(sig)) => break exit_code::SIGNAL_BASE + sig,
                    Some(ChildEvent::Stopped(sig)) => {
                        if !self.job_suspended(sig) {
                            stopped_since.get_or_insert_with(BootInstant::now);
                        }
                    }
                    Some(ChildEvent::Continued) => stopped_since = None,
                    Some(ChildEvent::Lost(errno)) => {
                        let error = std::io::Error::from_raw_os_error(errno);
                        break fail(format!("lost track of CMD: {error}"));
                    }
                    None => break fail("lost track of CMD"),
                },
                sig = signals.next() => {
                    forwarded |= Signals::stops(sig);
                    let _ = signal_group(self.pgid, sig);
                }
                reason = lost.wait(), if !lost_seen => {
                    // The group was killed already, in the lost signal's callback.
                    lost_seen = true;
                    eprintln!(
                        "fencelock: lock {:?} lost ({reason}); CMD's process group was killed",
                        self.spec.lock_name
                    );
                }
                _ = tick.tick() => {
                    self.pass_on_deadline();
                    if !terminated_for_grace && !lost_seen && self.grace_is_due() {
                        terminated_for_grace = true;
                    }
                    if let Some(since) = stopped_since
                        && !lost_seen
                        && since.elapsed() > self.spec.ttl
                    {
                        lost_seen = true;
                        let _ = signal_group(self.pgid, libc::SIGKILL);
                        eprintln!(
                            "fencelock: CMD stayed stopped for longer than the ttl ({:?}; waiting \
                             for a terminal it cannot read?); killed it, releasing lock {:?}",
                            self.spec.ttl, self.spec.lock_name
                        );
                    }
                }
            }
        };
        Outcome {
            code,
            lost: lost_seen || self.kill_on_loss.unkillable(),
            forwarded,
        }
    }

    /// Hands the lease's deadline to the guardian when it moved enough ([`guardian_needs`]).
    fn pass_on_deadline(&mut self) {
        let (deadline, now) = (self.lease.deadline(), BootInstant::now());
        if guardian_needs(*self.told_deadline, deadline, now, self.spec.ttl)
            && guardian::tell(
                self.supervision.guardian_fd,
                Message::Deadline {
                    boot_ns: deadline.since_boot().as_nanos() as u64,
                },
            )
        {
            *self.told_deadline = ToldDeadline { deadline, at: now };
        }
    }

    /// While renewals fail: SIGTERM (and SIGCONT) `grace` before the deadline; true once sent.
    fn grace_is_due(&self) -> bool {
        let left = BootInstant::now().until(self.lease.deadline());
        if !(self.lease.renewal_failing() && left <= self.spec.grace) {
            return false;
        }
        guardian::tell(self.supervision.guardian_fd, Message::Terminated);
        let _ = signal_group(self.pgid, libc::SIGTERM);
        let _ = signal_group(self.pgid, libc::SIGCONT);
        eprintln!(
            "fencelock: renewals of lock {:?} are failing and the lease ends in {:.1}s; sent \
             SIGTERM to CMD",
            self.spec.lock_name,
            left.as_secs_f64()
        );
        true
    }

    /// CMD stopped by `sig`: when that is the terminal suspending the job (Ctrl-Z, or CMD in the
    /// foreground touching the terminal), suspends `fencelock`'s own job too and, once the shell
    /// resumes it, gives the terminal back to CMD and continues it. False when the stop is
    /// something else (SIGSTOP, a background CMD stopped by the terminal), to be timed.
    fn job_suspended(&self, sig: libc::c_int) -> bool {
        let Some(terminal) = &self.supervision.terminal else {
            return false;
        };
        if !matches!(sig, libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU) {
            return false;
        }
        if terminal.is_ours() {
            // fencelock's job is in the foreground (`fg` after `&`) and CMD wants the terminal.
            terminal.give_to(self.pgid);
            let _ = signal_group(self.pgid, libc::SIGCONT);
            return true;
        }
        // SAFETY: a query on the terminal's descriptor.
        if unsafe { libc::tcgetpgrp(terminal.fd()) } != self.pgid {
            return false;
        }
        terminal.take_back(self.pgid);
        terminal.suspend_own_job();
        // Resumed: by `fg` (the terminal is ours again) or `bg`.
        if terminal.is_ours() {
            terminal.give_to(self.pgid);
        }
        let _ = signal_group(self.pgid, libc::SIGCONT);
        true
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    const TTL: Duration = Duration::from_secs(10);
    const A_HEARTBEATS_MOVE: Duration = Duration::from_millis(300);

    thread_local! {
        static SENT: RefCell<Vec<(libc::pid_t, libc::c_int)>> = const { RefCell::new(Vec::new()) };
    }

    /// A [`SignalGroup`] that records what it is asked and answers as for a group that is gone.
    fn record_group_gone(pgid: libc::pid_t, sig: libc::c_int) -> Result<(), std::io::Error> {
        SENT.with_borrow_mut(|sent| sent.push((pgid, sig)));
        Err(std::io::Error::from_raw_os_error(libc::ESRCH))
    }

    #[tokio::test]
    async fn a_loss_after_the_group_was_confirmed_gone_signals_nothing() {
        let kill_on_loss = KillOnLoss::new(record_group_gone);
        kill_on_loss.aim_at(4242);
        assert!(kill_on_loss.kill_and_confirm().await);
        SENT.with_borrow_mut(Vec::clear);

        // The lease lost before its release: the lost signal's callback runs.
        kill_on_loss.kill();
        let sent = SENT.with_borrow(Vec::clone);
        assert_eq!(sent, [], "4242 may name another process group by now");
    }

    /// The guardian's deadline, told at `at`.
    fn told_at(at: BootInstant) -> ToldDeadline {
        ToldDeadline {
            deadline: at.checked_add(TTL).unwrap(),
            at,
        }
    }

    #[test]
    fn the_guardian_is_told_a_later_deadline_only_once_it_moved_by_a_tenth_of_the_ttl() {
        let now = BootInstant::now();
        let told = told_at(now);
        let moved_later =
            |by| guardian_needs(told, told.deadline.checked_add(by).unwrap(), now, TTL);
        assert!(!moved_later(Duration::ZERO));
        assert!(!moved_later(A_HEARTBEATS_MOVE));
        assert!(!moved_later(TTL / 10));
        assert!(moved_later(TTL / 10 + Duration::from_millis(1)));
    }

    #[test]
    fn the_guardian_is_told_an_earlier_deadline_at_once() {
        let now = BootInstant::now();
        let told = told_at(now);
        let earlier = told.deadline.saturating_sub(Duration::from_nanos(1));
        assert!(guardian_needs(told, earlier, now, TTL));
    }

    /// A partition: the deadline moved by a heartbeat's step, then stopped. Left untold, the
    /// guardian's SIGTERM would come before the grace the lease's deadline allows.
    #[test]
    fn a_deadline_that_stopped_moving_is_told_a_tenth_of_the_ttl_after_the_last_one() {
        let told = told_at(BootInstant::now());
        let stopped = told.deadline.checked_add(A_HEARTBEATS_MOVE).unwrap();
        let after = |elapsed| told.at.checked_add(elapsed).unwrap();
        assert!(!guardian_needs(told, stopped, after(TTL / 10), TTL));
        let a_tenth_and_more = TTL / 10 + Duration::from_millis(1);
        assert!(guardian_needs(told, stopped, after(a_tenth_and_more), TTL));
        assert!(
            !guardian_needs(told, told.deadline, after(TTL), TTL),
            "nothing new to tell"
        );
    }
}
