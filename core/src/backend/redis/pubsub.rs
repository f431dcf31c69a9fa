//! Waking waiters on release: one shared subscription per lock name on the Locker's RESP3
//! connection, fanned out to every waiter of that name.
//!
//! A waiter subscribes, and has the server's confirmation, before it retries, so a release between
//! its failed attempt and its subscription is caught by that retry; a release after the
//! subscription bumps the channel's generation, which the waiter compares before it sleeps. Every
//! waiter of a name is woken and they race once (docs/design.md §3.1); the fallback poll covers a
//! message lost to a reconnect, and a disconnect wakes everybody at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::Notify;

use crate::backend::ReleaseWatch;
use crate::error::Result;
use crate::sync::unpoisoned;

use super::conn::Conn;
use super::error::map_error;

#[derive(Default)]
struct Channel {
    /// Changed only with the hub's `channels` map locked.
    waiters: AtomicUsize,
    subscribed: AtomicBool,
    generation: AtomicU64,
    notify: Notify,
}

#[derive(Default)]
pub struct WakeHub {
    channels: Mutex<HashMap<String, Arc<Channel>>>,
    /// Serializes SUBSCRIBE and UNSUBSCRIBE so an unsubscribe for a name nobody waits on can
    /// never land after a newer waiter's subscribe.
    changes: tokio::sync::Mutex<()>,
}

fn bump(channel: &Channel) {
    channel.generation.fetch_add(1, Ordering::AcqRel);
    channel.notify.notify_waiters();
}

impl WakeHub {
    /// Receives the connection's push messages (set as its push sender).
    pub fn on_push(&self, push: PushInfo) {
        match push.kind {
            PushKind::Message | PushKind::SMessage => {
                let name = match push.data.first() {
                    Some(Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
                    Some(Value::SimpleString(s)) => s.clone(),
                    _ => return,
                };
                if let Some(channel) = unpoisoned(&self.channels).get(&name) {
                    bump(channel);
                }
            }
            // Messages may have been lost while disconnected: everybody retries.
            PushKind::Disconnection => {
                for channel in unpoisoned(&self.channels).values() {
                    bump(channel);
                }
            }
            _ => {}
        }
    }

    /// Subscribes to `channel` (confirmed when this returns) for one waiter.
    pub async fn watch(self: &Arc<Self>, conn: &Conn, channel: &str) -> Result<HubWatch> {
        let _changes = self.changes.lock().await;
        let state = {
            let mut channels = unpoisoned(&self.channels);
            let state = channels.entry(channel.to_string()).or_default().clone();
            state.waiters.fetch_add(1, Ordering::AcqRel);
            state
        };
        if !state.subscribed.load(Ordering::Acquire) {
            if let Err(e) = conn.subscribe(channel).await {
                self.release_waiter(channel, &state);
                return Err(map_error("redis subscribe", e));
            }
            state.subscribed.store(true, Ordering::Release);
        }
        let seen = state.generation.load(Ordering::Acquire);
        Ok(HubWatch {
            runtime: tokio::runtime::Handle::current(),
            hub: Arc::downgrade(self),
            conn: conn.clone(),
            channel: channel.to_string(),
            state,
            seen,
        })
    }

    /// Drops one waiter; returns whether it was the last one.
    fn release_waiter(&self, channel: &str, state: &Arc<Channel>) -> bool {
        let mut channels = unpoisoned(&self.channels);
        let left = state
            .waiters
            .fetch_sub(1, Ordering::AcqRel)
            .saturating_sub(1);
        if left == 0 && !state.subscribed.load(Ordering::Acquire) {
            channels.remove(channel);
        }
        left == 0
    }
}

pub struct HubWatch {
    /// Where the unsubscription runs when the watch is dropped, wherever that happens (a Rust
    /// caller may drop an acquire future outside any runtime).
    runtime: tokio::runtime::Handle,
    hub: Weak<WakeHub>,
    conn: Conn,
    channel: String,
    state: Arc<Channel>,
    seen: u64,
}

#[async_trait]
impl ReleaseWatch for HubWatch {
    async fn wait(&mut self, max: Duration) {
        let notified = self.state.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let now = self.state.generation.load(Ordering::Acquire);
        if now == self.seen {
            let _ = tokio::time::timeout(max, notified).await;
        }
        self.seen = self.state.generation.load(Ordering::Acquire);
    }
}

impl Drop for HubWatch {
    fn drop(&mut self) {
        let Some(hub) = self.hub.upgrade() else {
            return;
        };
        if !hub.release_waiter(&self.channel, &self.state) {
            return;
        }
        let channel = self.channel.clone();
        let conn = self.conn.clone();
        self.runtime.spawn(async move {
            let _changes = hub.changes.lock().await;
            let idle = {
                let mut channels = unpoisoned(&hub.channels);
                match channels.get(&channel) {
                    Some(state) if state.waiters.load(Ordering::Acquire) == 0 => {
                        channels.remove(&channel);
                        true
                    }
                    _ => false,
                }
            };
            if idle {
                let _ = conn.unsubscribe(&channel).await;
            }
        });
    }
}
