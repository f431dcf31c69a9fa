//! `fencelock status NAME`.

use std::time::Duration;

use fencelock::{HolderDescription, Locker, LockerUrl};

use crate::{UrlArg, fail, locker_options, runtime};

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    url: UrlArg,
    /// The lock's name.
    name: String,
}

pub fn main(args: StatusArgs) -> i32 {
    let url = match crate::url::resolve(&args.url) {
        Ok(url) => url,
        Err(e) => return fail(e),
    };
    let shown = LockerUrl::parse(&url).map(|u| u.redacted()).unwrap_or_else(|_| fencelock::url::redact_secrets(&url));
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start: {e}")),
    };
    rt.block_on(async {
        let locker = match Locker::connect_with(&url, locker_options()).await {
            Ok(l) => l,
            Err(e) => return fail(e),
        };
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
            if let Some(holder) = info.holder.as_deref().map(HolderDescription::parse) {
                println!("  holder:    {}", describe(&holder));
            }
            if let Some(left) = info.time_left {
                println!("  time left: {}", human(left));
            }
        } else {
            println!("  state:     free");
            if let Some(token) = info.token {
                println!("  last token: {token}");
            }
        }
        locker.close().await;
        0
    })
}

fn describe(h: &HolderDescription) -> String {
    let mut parts = Vec::new();
    if let Some(host) = &h.host {
        parts.push(format!("host {host}"));
    }
    if let Some(pid) = h.pid {
        parts.push(format!("pid {pid}"));
    }
    if let Some(lang) = &h.language {
        parts.push(lang.clone());
    }
    if let Some(text) = &h.text {
        parts.push(format!("{text:?}"));
    }
    parts.join(", ")
}

fn human(d: Duration) -> String {
    if d >= Duration::from_secs(120) {
        format!("{}m{}s", d.as_secs() / 60, d.as_secs() % 60)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}
