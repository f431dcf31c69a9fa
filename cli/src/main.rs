//! `fencelock`: run a program while holding a distributed lock.

// The supervisor (guardian.rs, reaper.rs, terminal.rs) is written against Linux: a parent-death
// signal (prctl), timerfd, waitid, and Linux's job control semantics. Elsewhere the build stops
// here rather than compile a supervisor nobody has run; the Python and npm source builds leave
// the command out on such systems.
#[cfg(not(target_os = "linux"))]
compile_error!(
    "the fencelock command runs on Linux only: its supervisor needs prctl(PR_SET_PDEATHSIG), \
     timerfd and waitid (cli/src/guardian.rs, reaper.rs); the libraries build without it"
);

mod admin;
mod child;
mod duration;
mod elect;
mod exit_code;
mod guardian;
mod reaper;
mod run;
mod show;
mod status;
mod supervise;
mod terminal;
mod url;

use std::ffi::OsString;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "fencelock",
    version,
    about = "Run a program while holding a distributed lock with a fencing token",
    long_about = "Run a program while holding a distributed lock with a fencing token.\n\n\
        Locks live in a backend chosen by URL: SQLite (the default, no server: sqlite:///path.db), \
        Redis (redis://, rediss://, redis+cluster://, rediss+cluster://), Redlock over N \
        independent Redis masters (redlock://h1:6379,h2:6379,h3:6379), ZooKeeper (zk://, \
        zookeeper://), PostgreSQL (postgres://, postgresql://) and MariaDB or MySQL (mariadb://, \
        mysql://). Every acquisition gets a fencing token that strictly increases per lock name; \
        the program receives it as FENCELOCK_TOKEN so the resource it writes to can refuse a \
        stale holder."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Hold lock NAME while CMD runs, then release it: the mutex NAME, or with --permits N,
    /// --shared or --exclusive a semaphore's permit or a read-write lock's read or write lock.
    Run(run::RunArgs),
    /// Run CMD only while this process leads the election NAME; campaign again on loss.
    Elect(elect::ElectArgs),
    /// Show who holds lock NAME (every holder of a semaphore or read-write lock), its token,
    /// the time left and its waiters.
    Status(status::StatusArgs),
    /// List the locks held now, or those whose names start with PREFIX.
    List(admin::ListArgs),
    /// Free lock NAME whoever holds it: needs --force; DANGEROUS (see its --help).
    Release(admin::ReleaseArgs),
}

/// `--url`, then `FENCELOCK_URL`, then the per-user SQLite default.
#[derive(clap::Args, Debug, Clone)]
pub struct UrlArg {
    /// Backend URL (sqlite:///path.db, redis://host:6379, redlock://h1:6379,h2:6379,h3:6379,
    /// zk://host:2181, postgres://…, mariadb://…).
    /// Default: $FENCELOCK_URL, else a per-user SQLite file.
    #[arg(long, value_name = "URL")]
    url: Option<String>,
}

fn main() {
    let code = std::panic::catch_unwind(real_main).unwrap_or_else(|_| {
        eprintln!("fencelock: internal error (a bug): please report it");
        exit_code::OWN_ERROR
    });
    std::process::exit(code);
}

fn real_main() -> i32 {
    let args: Vec<OsString> = std::env::args_os().collect();
    if let Some(pipe) = guardian::entry(&args) {
        guardian::guard(pipe);
    }
    let default_url = url::default_url();
    let after_help = format!(
        "Default URL: {}\n  (per user: jobs of several users must share one --url or FENCELOCK_URL)\n\n\
         Durations: 30s, 500ms, 2m, 1h, or a bare number of seconds.",
        default_url
            .as_deref()
            .unwrap_or("none (set $HOME or XDG_STATE_HOME)")
    );
    let run_help = format!("{}\n\n{after_help}", run::AFTER_HELP);
    let elect_help = format!("{}\n\n{after_help}", elect::AFTER_HELP);
    let command = Cli::command()
        .after_help(after_help.clone())
        .mut_subcommand("run", |c| c.after_help(run_help))
        .mut_subcommand("elect", |c| c.after_help(elect_help))
        .mut_subcommand("list", |c| c.after_help(after_help.clone()))
        .mut_subcommand("release", |c| {
            c.after_help(format!("{}\n\n{after_help}", admin::RELEASE_AFTER_HELP))
        })
        .mut_subcommand("status", |c| c.after_help(after_help));
    let matches = match command.try_get_matches_from(args) {
        Ok(m) => m,
        Err(e) => {
            let informational = matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            );
            let _ = e.print();
            return if informational {
                0
            } else {
                exit_code::OWN_ERROR
            };
        }
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return exit_code::OWN_ERROR;
        }
    };
    match cli.command {
        Command::Run(args) => run::main(args),
        Command::Elect(args) => elect::main(args),
        Command::Status(args) => status::main(args),
        Command::List(args) => admin::list(args),
        Command::Release(args) => admin::release(args),
    }
}

/// The runtime the command's async work runs on, made after the guardian was forked.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

pub fn locker_options() -> fencelock::LockerOptions {
    fencelock::LockerOptions::default()
        .with_language("cli")
        .with_poll_interval(Duration::from_millis(50))
}

/// Reports fencelock's own error and returns its exit code.
pub fn fail(message: impl std::fmt::Display) -> i32 {
    eprintln!("fencelock: {message}");
    exit_code::OWN_ERROR
}
