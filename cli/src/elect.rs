//! `fencelock elect NAME -- CMD…`: run CMD only while this process leads the election NAME.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use fencelock::{ErrorCode, LockOptions, Locker};

use crate::child::{Signals, Supervision, launch};
use crate::supervise::{ChildSpec, effective_grace, run_child};
use crate::{UrlArg, duration, exit_code, fail, locker_options};

pub const AFTER_HELP: &str = "\
fencelock campaigns for NAME (waits to hold its lock) and runs CMD once it leads, with
FENCELOCK_TERM and FENCELOCK_TOKEN set to its term: the lock's fencing token, larger than every
earlier leader's term, for fencing CMD's writes. If leadership is lost, CMD's process group is
killed and fencelock campaigns again. When CMD exits by itself, fencelock resigns and exits with
CMD's code; with --restart it resigns, campaigns again and reruns CMD. INT, TERM, HUP and QUIT
are forwarded to CMD and end fencelock (no restart, even when leadership is lost meanwhile);
USR1 and USR2 are forwarded only. While campaigning they end it at once. CMD is supervised as under `fencelock run` (see its --help).

Exit codes: CMD's own; 125 fencelock's own error; 126 CMD not executable; 127 CMD not found;
128+N CMD (or fencelock while campaigning) stopped by signal N.

Examples:
  fencelock elect report-scheduler -- ./scheduler            one scheduler in the cluster
  fencelock elect --restart --ttl 10s indexer -- ./indexer   keep an indexer running somewhere";

#[derive(clap::Args, Debug)]
pub struct ElectArgs {
    #[command(flatten)]
    url: UrlArg,
    /// Lease length; renewed every ttl/3 while leading. A leader that dies unannounced is
    /// replaced within about this long.
    #[arg(long, default_value = "30s", value_parser = duration::parse, value_name = "DURATION", allow_hyphen_values = true)]
    ttl: Duration,
    /// When renewals fail, SIGTERM the group this long before the client deadline [default: 5s;
    /// below ttl/3, else clamped to ttl/4].
    #[arg(long, value_parser = duration::parse, value_name = "DURATION", allow_hyphen_values = true)]
    grace: Option<Duration>,
    /// When CMD exits by itself, resign, campaign again and rerun it instead of exiting.
    #[arg(long)]
    restart: bool,
    /// With --restart, how long to wait before campaigning again (so a CMD that fails at once
    /// does not spin, and other candidates get their turn).
    #[arg(long, default_value = "1s", value_parser = duration::parse, value_name = "DURATION", allow_hyphen_values = true)]
    restart_delay: Duration,
    /// Text stored with the leader's lock so `status` shows who leads.
    #[arg(long, value_name = "TEXT")]
    holder: Option<String>,
    /// The election's name (any text up to 255 bytes; it is data, never a path).
    name: String,
    /// The program to run while leading, and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "CMD")]
    command: Vec<OsString>,
}

pub fn main(args: ElectArgs) -> i32 {
    let options = LockOptions::default().with_ttl(args.ttl);
    let args = &args;
    launch(
        &args.url,
        &args.name,
        options,
        args.holder.as_ref(),
        &args.command,
        |url, options, program, supervision| async move {
            lead(&url, args, &options, &program, &supervision).await
        },
    )
}

async fn lead(
    url: &str,
    args: &ElectArgs,
    options: &LockOptions,
    program: &Path,
    supervision: &Supervision,
) -> i32 {
    let mut signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => return fail(format!("cannot install signal handlers: {e}")),
    };
    let locker = match Locker::connect_with(url, locker_options()).await {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    // Timed from the lease's real life (on ZooKeeper the session timeout, not --ttl), once:
    // every term's lease comes from this Locker.
    let mut grace = None;
    let code = loop {
        let leadership = tokio::select! {
            won = locker.campaign(&args.name, options) => match won {
                Ok(leadership) => leadership,
                Err(e) => break fail(e),
            },
            sig = signals.next() => break exit_code::SIGNAL_BASE + sig,
        };
        let term = leadership.term().to_string();
        eprintln!("fencelock: leading {:?} in term {term}", args.name);
        let ttl = leadership.lease().ttl();
        let spec = ChildSpec {
            command: &args.command,
            program,
            lock_name: &args.name,
            ttl,
            grace: *grace.get_or_insert_with(|| effective_grace(args.grace, ttl)),
            env: vec![("FENCELOCK_TERM", term.clone()), ("FENCELOCK_TOKEN", term)],
        };
        let outcome = run_child(&spec, leadership.lease(), supervision, &mut signals).await;
        if outcome.lost {
            if outcome.forwarded {
                // Told to stop while leadership was being lost: stop, do not campaign again.
                break exit_code::LOST;
            }
            eprintln!(
                "fencelock: no longer leading {:?}; campaigning again",
                args.name
            );
            continue;
        }
        match leadership.resign().await {
            Ok(()) => {}
            Err(e) if e.code() == ErrorCode::Lost => {
                eprintln!(
                    "fencelock: leadership of {:?} was lost before CMD ended: {e}",
                    args.name
                );
                if !args.restart || outcome.forwarded {
                    break exit_code::LOST;
                }
            }
            Err(e) => eprintln!("fencelock: resigning failed ({e}); the lock expires on its own"),
        }
        if !args.restart || outcome.forwarded {
            break outcome.code;
        }
        eprintln!(
            "fencelock: CMD exited with {}; campaigning again (--restart)",
            outcome.code
        );
        tokio::select! {
            _ = tokio::time::sleep(args.restart_delay) => {}
            sig = signals.next() => break exit_code::SIGNAL_BASE + sig,
        }
    };
    locker.close().await;
    code
}
