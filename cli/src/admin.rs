//! `fencelock list [PREFIX]` and `fencelock release --force NAME`: looking at and clearing
//! locks without holding them.

use std::future::Future;

use fencelock::{ErrorCode, LockKind, Locker, LockerUrl};

use crate::show::{describe, human};
use crate::{UrlArg, fail, locker_options, runtime};

/// Exit code of `release --force` when nobody held the lock (nothing was changed).
pub const NOT_HELD: i32 = 1;

pub const RELEASE_AFTER_HELP: &str = "DANGEROUS: --force frees the lock whoever holds it. The holder may \
still be working: it is told it lost the lock at its next renewal (within a third of its ttl; on \
ZooKeeper at once), and until then two holders may run. Writes guarded by a fence stay safe (the \
next token is larger, so the old holder's writes are refused); anything else the old holder does \
is not. Use it for a holder you know is dead or stuck.\n\n\
Exit codes: 0 released; 1 nobody held the lock (nothing changed); 125 any other error.";

#[derive(clap::Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    url: UrlArg,
    /// Show only locks whose names start with PREFIX (plain text: no wildcards).
    #[arg(default_value = "")]
    prefix: String,
}

#[derive(clap::Args, Debug)]
pub struct ReleaseArgs {
    #[command(flatten)]
    url: UrlArg,
    /// Free the lock whoever holds it (required: see DANGEROUS below).
    #[arg(long)]
    force: bool,
    /// The lock's name.
    name: String,
}

/// Connects, runs `body` and closes; fencelock's own errors become exit code 125.
pub(crate) fn with_locker<F, Fut>(url: &UrlArg, body: F) -> i32
where
    F: FnOnce(Locker, String) -> Fut,
    Fut: Future<Output = i32>,
{
    let url = match crate::url::resolve(url) {
        Ok(url) => url,
        Err(e) => return fail(e),
    };
    let shown = LockerUrl::parse(&url)
        .map(|u| u.redacted())
        .unwrap_or_else(|_| fencelock::redact_secrets(&url));
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start: {e}")),
    };
    rt.block_on(async {
        let locker = match Locker::connect_with(&url, locker_options()).await {
            Ok(l) => l,
            Err(e) => return fail(e),
        };
        let code = body(locker.clone(), shown).await;
        locker.close().await;
        code
    })
}

pub fn list(args: ListArgs) -> i32 {
    with_locker(&args.url, |locker, shown| async move {
        let listed = match locker.list(&args.prefix).await {
            Ok(listed) => listed,
            Err(e) => return fail(e),
        };
        if args.prefix.is_empty() {
            println!("held locks on {shown}: {}", listed.locks.len());
        } else {
            println!(
                "held locks starting with {:?} on {shown}: {}",
                args.prefix,
                listed.locks.len()
            );
        }
        for info in &listed.locks {
            let mut line = format!("{:?}", info.name);
            if info.kind != LockKind::Mutex {
                // Its holders are `status NAME`'s to show; here only how many.
                line.push_str(&format!("  {}", info.kind));
                match info.leases.len() {
                    0 => {}
                    1 => line.push_str(", 1 holder"),
                    n => line.push_str(&format!(", {n} holders")),
                }
                if let Some(token) = info.token {
                    line.push_str(&format!("  last token {token}"));
                }
            } else if let Some(token) = info.token {
                line.push_str(&format!("  token {token}"));
            }
            if let Some(left) = info.time_left {
                line.push_str(&format!("  {} left", human(left)));
            }
            if let Some(holder) = info.holder_description() {
                line.push_str(&format!("  ({})", describe(&holder)));
            }
            println!("  {line}");
        }
        if listed.truncated {
            println!(
                "  … more than {} matched; narrow the prefix to see the rest",
                fencelock::LIST_LIMIT
            );
        }
        0
    })
}

pub fn release(args: ReleaseArgs) -> i32 {
    if !args.force {
        return fail(format!(
            "refusing to release {:?}: only its holder releases a lock. To free it whoever holds it, \
             run `fencelock release --force NAME` (dangerous: see `fencelock release --help`)",
            args.name
        ));
    }
    with_locker(&args.url, |locker, shown| async move {
        match locker.force_release(&args.name).await {
            Ok(()) => {
                println!(
                    "lock {:?} on {shown}: released by force; its holder loses it at its next renewal",
                    args.name
                );
                0
            }
            Err(e) if e.code() == ErrorCode::NotHeld => {
                eprintln!(
                    "fencelock: lock {:?} on {shown} is not held: nothing to release",
                    args.name
                );
                NOT_HELD
            }
            Err(e) => fail(e),
        }
    })
}
