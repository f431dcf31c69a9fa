//! `fencelock status NAME`.

use fencelock::HolderDescription;

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
