//! `fencelock run [--permits N | --shared | --exclusive] NAME -- CMD…`: hold the mutex NAME, a
//! permit of the semaphore NAME, or the read or write lock of the read-write lock NAME while CMD
//! runs. Every primitive is supervised the same way (`supervise.rs`); only the lock taken and the
//! variable CMD finds its token in differ.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use fencelock::{ErrorCode, LockMode, LockOptions, Locker, MAX_PERMITS};

use crate::child::{Signals, Supervision, launch};
use crate::supervise::{ChildSpec, effective_grace, run_child};
use crate::{UrlArg, duration, exit_code, fail, locker_options};

pub const AFTER_HELP: &str = "\
Plain `run NAME` takes the mutex NAME (one holder at a time). --permits N takes one of N permits
of the semaphore NAME (at most N CMDs at once, fleet-wide); --shared and --exclusive take the
read and the write lock of the read-write lock NAME (any number of readers, or one writer; once
a writer waits, new readers queue behind it). These are three kinds of lock: a name in use as
one kind cannot be taken as another (exit 125, INVALID_ARGUMENT naming both), so `run NAME` and
`run --exclusive NAME` are not the same lock. Every participant of a semaphore must use the same
N while it is held or waited on.

CMD runs as the leader of its own process group with FENCELOCK_NAME and its lease's token
(decimal) set: FENCELOCK_TOKEN for the mutex and for --exclusive (a fencing token),
FENCELOCK_PERMIT_TOKEN for --permits and FENCELOCK_READ_TOKEN for --shared. Do not fence with a
permit or read token: several holders have one at once, so \"the newest token wins\" would be
wrong. A token variable inherited from an outer fencelock is removed.

INT, TERM, HUP, QUIT, USR1 and USR2 sent to fencelock are forwarded to the group. A guardian
process (`lease-guardian`, in a session of its own) kills the whole group at the lease's
deadline and if fencelock itself dies (even kill -9 of its process group), so CMD never runs
past the lease, even while fencelock is stopped. When renewals keep failing, the group gets
SIGTERM --grace before the lease's client deadline and SIGKILL at the deadline; a lease found
taken over kills the group at once. In a terminal's foreground CMD gets the terminal, and Ctrl-Z
suspends the whole job. When CMD exits, anything left in its group is killed before the lock is
released. All of this holds in every mode.

Exit codes: CMD's own; 124 not acquired within --wait (or --conflict-exit-code);
125 fencelock's own error; 126 CMD not executable; 127 CMD not found; 122 lease lost;
128+N CMD killed by signal N.

Examples:
  fencelock run nightly-report -- ./report.sh            wait for the lock, then run
  fencelock run --wait 0 nightly-report -- ./report.sh   cron style: skip if busy (exit 124)
  fencelock run --permits 3 reports -- ./report.sh       at most 3 reports at once
  fencelock run --shared catalog -- ./read-catalog.sh    many readers at once...
  fencelock run --exclusive catalog -- ./rebuild.sh      ...or one writer";

/// `--wait`: a duration, `0` to try once, or `forever`.
#[derive(Debug, Clone, Copy)]
pub struct Wait(Option<Duration>);

fn parse_wait(text: &str) -> Result<Wait, String> {
    duration::parse_wait(text).map(Wait)
}

fn parse_permits(text: &str) -> Result<u32, String> {
    let wrong = || format!("a semaphore has 1 to {MAX_PERMITS} permits, not {text:?}");
    let permits: u32 = text.trim().parse().map_err(|_| wrong())?;
    if permits == 0 || permits > MAX_PERMITS {
        return Err(wrong());
    }
    Ok(permits)
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
    /// When renewals fail, SIGTERM the group this long before the client deadline [default: 5s;
    /// below ttl/3, else clamped to ttl/4].
    #[arg(long, value_parser = duration::parse, value_name = "DURATION", allow_hyphen_values = true)]
    grace: Option<Duration>,
    /// Exit code when the lock is not acquired within --wait.
    #[arg(long, default_value_t = exit_code::NOT_ACQUIRED, value_name = "N",
          value_parser = clap::value_parser!(i32).range(0..=255))]
    conflict_exit_code: i32,
    /// Text stored with the lock so `status` can show who holds it.
    #[arg(long, value_name = "TEXT")]
    holder: Option<String>,
    /// Take one of N permits of the semaphore NAME (1 to 10000): at most N CMDs at once.
    /// CMD gets FENCELOCK_PERMIT_TOKEN.
    #[arg(long, value_name = "N", value_parser = parse_permits, allow_hyphen_values = true,
          conflicts_with_all = ["shared", "exclusive"])]
    permits: Option<u32>,
    /// Take the read lock of the read-write lock NAME, shared with other readers.
    /// CMD gets FENCELOCK_READ_TOKEN.
    #[arg(long, conflicts_with = "exclusive")]
    shared: bool,
    /// Take the write lock of the read-write lock NAME (not the mutex NAME: see below).
    /// CMD gets FENCELOCK_TOKEN.
    #[arg(long)]
    exclusive: bool,
    /// The lock's name (any text up to 255 bytes; it is data, never a path).
    name: String,
    /// The program to run, and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "CMD")]
    command: Vec<OsString>,
}

impl RunArgs {
    /// How NAME is held, from --permits, --shared and --exclusive (clap let at most one through).
    fn mode(&self) -> LockMode {
        match (self.permits, self.shared, self.exclusive) {
            (Some(permits), _, _) => LockMode::Permit { permits },
            (None, true, _) => LockMode::Read,
            (None, false, true) => LockMode::Write,
            (None, false, false) => LockMode::Exclusive,
        }
    }
}

/// The variable CMD finds its token in: FENCELOCK_TOKEN only for a lease that may fence (the
/// name's one holder), so a permit or read token is never mistaken for a fencing token.
fn token_variable(mode: LockMode) -> &'static str {
    match mode {
        LockMode::Permit { .. } => "FENCELOCK_PERMIT_TOKEN",
        LockMode::Read => "FENCELOCK_READ_TOKEN",
        LockMode::Exclusive | LockMode::Write => "FENCELOCK_TOKEN",
    }
}

pub fn main(args: RunArgs) -> i32 {
    let options = LockOptions::default()
        .with_ttl(args.ttl)
        .with_wait(args.wait.0);
    let args = &args;
    launch(
        &args.url,
        &args.name,
        options,
        args.holder.as_ref(),
        &args.command,
        |url, options, program, supervision| async move {
            hold_and_run(&url, args, &options, &program, &supervision).await
        },
    )
}

async fn hold_and_run(
    url: &str,
    args: &RunArgs,
    options: &LockOptions,
    program: &Path,
    supervision: &Supervision,
) -> i32 {
    let locker = match Locker::connect_with(url, locker_options()).await {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let mode = args.mode();
    let acquired = match locker.lock(&args.name, mode) {
        Ok(lock) => lock.acquire(options).await,
        Err(e) => Err(e),
    };
    let lease = match acquired {
        Ok(lease) => lease,
        Err(e) if e.code() == ErrorCode::Timeout => {
            eprintln!("fencelock: {}", e.message());
            return args.conflict_exit_code;
        }
        Err(e) => return fail(e),
    };
    // Timed from the lease's real life: on ZooKeeper the session timeout, not --ttl.
    let ttl = lease.ttl();
    let spec = ChildSpec {
        command: &args.command,
        program,
        lock_name: &args.name,
        ttl,
        grace: effective_grace(args.grace, ttl),
        env: vec![(token_variable(mode), lease.token().to_string())],
    };
    let code = match Signals::install() {
        Ok(mut signals) => {
            run_child(&spec, &lease, supervision, &mut signals)
                .await
                .code
        }
        Err(e) => fail(format!("cannot install signal handlers: {e}")),
    };
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
