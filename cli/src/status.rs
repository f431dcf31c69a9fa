//! `fencelock status NAME`: who holds NAME and who waits, for a mutex, a semaphore or a
//! read-write lock.

use fencelock::{HolderDescription, LeaseInfo, LockInfo, LockKind, Waiter};

use crate::show::{describe, human, printable};
use crate::{UrlArg, fail};

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    url: UrlArg,
    /// The lock's name.
    name: String,
}

pub fn main(args: StatusArgs) -> i32 {
    crate::admin::with_locker(&args.url, |locker, shown| async move {
        let info = match locker.inspect(&args.name).await {
            Ok(info) => info,
            Err(e) => return fail(e),
        };
        println!("lock {:?} on {shown}", args.name);
        match info.kind {
            LockKind::Mutex => show_mutex(&info),
            LockKind::Semaphore | LockKind::ReadWrite => show_shared(&info),
        }
        0
    })
}

fn show_mutex(info: &LockInfo) {
    if info.held {
        println!("  state:     held");
        if let Some(token) = info.token {
            println!("  token:     {token}");
        }
        if let Some(holder) = info.holder_description() {
            println!("  holder:    {}", describe(&holder));
        }
        if let Some(left) = info.time_left {
            println!("  time left: {}", human(left));
        }
        show_waiters(&info.waiters);
    } else {
        println!("  state:     free");
        if let Some(token) = info.token {
            println!("  last token: {token}");
        }
    }
}

/// A semaphore or read-write lock: several holders, each with its own lease.
fn show_shared(info: &LockInfo) {
    match info.permits {
        Some(permits) => println!("  kind:      {}, {permits} permits", info.kind),
        None => println!("  kind:      {}", info.kind),
    }
    if info.held {
        println!("  state:     held by {}", holders(info));
    } else {
        println!("  state:     free");
    }
    if let Some(token) = info.token {
        println!("  last token: {token}");
    }
    if !info.leases.is_empty() {
        println!("  holders:");
        for lease in &info.leases {
            println!("    {}", lease_line(lease));
        }
    }
    show_waiters(&info.waiters);
}

/// "2 of 3 permits", "3 readers", "a writer".
fn holders(info: &LockInfo) -> String {
    let count = info.leases.len();
    let plural = |one: &str| {
        if count == 1 {
            format!("1 {one}")
        } else {
            format!("{count} {one}s")
        }
    };
    match (info.kind, info.permits) {
        (LockKind::Semaphore, Some(permits)) => format!("{count} of {permits} permits"),
        (LockKind::Semaphore, None) => plural("permit"),
        _ if info
            .leases
            .iter()
            .any(|lease| lease.mode == fencelock::LockMode::Write) =>
        {
            "a writer".to_string()
        }
        _ => plural("reader"),
    }
}

/// One holder: its mode, token, time left and description, each when known.
fn lease_line(lease: &LeaseInfo) -> String {
    let mut line = format!("{:<6}", lease.mode.as_str());
    if let Some(token) = lease.token {
        line.push_str(&format!("  token {token}"));
    }
    if let Some(left) = lease.time_left {
        line.push_str(&format!("  {} left", human(left)));
    }
    if let Some(holder) = lease.holder_description() {
        line.push_str(&format!("  ({})", describe(&holder)));
    }
    line
}

fn show_waiters(waiters: &[Waiter]) {
    if waiters.is_empty() {
        return;
    }
    println!("  waiting:   {}", waiters.len());
    for waiter in waiters {
        let who = waiter
            .holder
            .as_deref()
            .map(HolderDescription::parse)
            .map(|h| describe(&h));
        println!(
            "    {} {}",
            printable(&waiter.node),
            who.unwrap_or_default()
        );
    }
}
