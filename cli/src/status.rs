//! `fencelock status NAME`.

use std::time::Duration;

use fencelock::HolderDescription;

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
            if !info.waiters.is_empty() {
                println!("  waiting:   {}", info.waiters.len());
                for waiter in &info.waiters {
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
        } else {
            println!("  state:     free");
            if let Some(token) = info.token {
                println!("  last token: {token}");
            }
        }
        0
    })
}

/// A holder's fields for a terminal. Any participant writes them: control characters (ANSI or
/// OSC escapes that would drive the operator's terminal) are shown escaped.
pub(crate) fn describe(h: &HolderDescription) -> String {
    let mut parts = Vec::new();
    if let Some(host) = &h.host {
        parts.push(format!("host {}", printable(host)));
    }
    if let Some(pid) = h.pid {
        parts.push(format!("pid {pid}"));
    }
    if let Some(lang) = &h.language {
        parts.push(printable(lang));
    }
    if let Some(text) = &h.text {
        parts.push(format!("{text:?}"));
    }
    parts.join(", ")
}

/// `text` with control characters escaped (`\u{1b}`), other characters as they are.
pub(crate) fn printable(text: &str) -> String {
    text.chars()
        .flat_map(|c| -> Box<dyn Iterator<Item = char>> {
            if c.is_control() {
                Box::new(c.escape_unicode())
            } else {
                Box::new(std::iter::once(c))
            }
        })
        .collect()
}

pub(crate) fn human(d: Duration) -> String {
    if d >= Duration::from_secs(120) {
        format!("{}m{}s", d.as_secs() / 60, d.as_secs() % 60)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}
