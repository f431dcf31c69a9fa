//! `fencelock run NAME -- CMD…`: hold the lock while CMD runs.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use fencelock::{ErrorCode, LockOptions, Locker};

use crate::child::{Signals, Supervision, launch};
use crate::supervise::{ChildSpec, effective_grace, run_child};
use crate::{UrlArg, duration, exit_code, fail, locker_options};

pub const AFTER_HELP: &str = "\
CMD runs as the leader of its own process group with FENCELOCK_TOKEN (the fencing token,
decimal) and FENCELOCK_NAME set. INT, TERM, HUP, QUIT, USR1 and USR2 sent to fencelock are
forwarded to the group. A guardian process (`lease-guardian`, in a session of its own) kills the whole group at
the lease's deadline and if fencelock itself dies (even kill -9 of its process group), so CMD
never runs past the lease, even while fencelock is stopped. When renewals keep failing, the
group gets SIGTERM --grace before the lease's client deadline and SIGKILL at the deadline; a
lease found taken over kills the group at once. In a terminal's foreground CMD gets the
terminal, and Ctrl-Z suspends the whole job. When CMD exits, anything left in its group is
killed before the lock is released.

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
    /// The lock's name (any text up to 255 bytes; it is data, never a path).
    name: String,
    /// The program to run, and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "CMD")]
    command: Vec<OsString>,
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
    let lease = match locker.acquire(&args.name, options).await {
        Ok(lease) => lease,
        Err(e) if e.code() == ErrorCode::Timeout => {
            eprintln!("fencelock: {}", e.message());
            return args.conflict_exit_code;
        }
        Err(e) => return fail(e),
    };
    let grace = effective_grace(args.grace, args.ttl);
    let spec = ChildSpec {
        command: &args.command,
        program,
        lock_name: &args.name,
        ttl: args.ttl,
        grace,
        env: vec![("FENCELOCK_TOKEN", lease.token().to_string())],
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
