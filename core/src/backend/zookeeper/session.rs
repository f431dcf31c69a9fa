//! The session's lifecycle: making one (and the chroot), sending its heartbeats, following its
//! state (suspending and resuming its leases), and on its end making its leases lost and
//! getting a new one.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::runtime::Handle;
use zookeeper_client::{Acls, Client, CreateMode, SessionState};

use super::Inner;
use super::cleanup::Cleanup;
use super::error::{CONNECTION_KEPT_DROPPING, Retry, ZkError, is_session_gone, map_error, retry};
use super::heartbeat::{self, Heartbeat};
use crate::backend::LeaseEvents;
use crate::clock::BootInstant;
use crate::error::{Error, Result};
use crate::ids::OwnerId;
use crate::signal::LossReason;
use crate::sync::unpoisoned;

/// One ZooKeeper session. A session that ended (expired, closed, refused) is never revived:
/// its ephemeral nodes are gone and a new one is made.
pub(super) struct Session {
    pub(super) client: Client,
    pub(super) generation: u64,
    /// The negotiated session timeout, as the first connect negotiated it (`connect_session`
    /// says why only that one).
    pub(super) timeout: Duration,
    /// Proves until when the leader keeps this session (see [`heartbeat`](super::heartbeat)).
    pub(super) heartbeat: Arc<Heartbeat>,
}

impl Session {
    fn state(&self) -> SessionState {
        self.client.state()
    }

    pub(super) fn is_ended(&self) -> bool {
        self.state().is_terminated()
    }

    pub(super) fn is_connected(&self) -> bool {
        matches!(
            self.state(),
            SessionState::SyncConnected | SessionState::ConnectedReadOnly
        )
    }
}

impl Inner {
    pub(super) fn live_session(&self) -> Option<Arc<Session>> {
        unpoisoned(&self.current).clone().filter(|s| !s.is_ended())
    }

    pub(super) fn session_of(&self, generation: u64) -> Option<Arc<Session>> {
        self.live_session().filter(|s| s.generation == generation)
    }

    /// The live session, making a new one if the last one ended.
    pub(super) async fn session(self: &Arc<Self>) -> Result<Arc<Session>> {
        self.ensure_open()?;
        if let Some(session) = self.live_session() {
            return Ok(session);
        }
        let _connecting = self.connecting.lock().await;
        self.ensure_open()?;
        if let Some(session) = self.live_session() {
            return Ok(session);
        }
        let session = self.connect_session().await?;
        *unpoisoned(&self.current) = Some(session.clone());
        if self.closed.load(Ordering::Acquire) {
            unpoisoned(&self.current).take();
            return Err(Error::closed("the locker was closed"));
        }
        Ok(session)
    }

    async fn connect_session(self: &Arc<Self>) -> Result<Arc<Session>> {
        let s = &self.settings;
        let mut connector = Client::connector()
            .with_session_timeout(s.session_timeout)
            .with_fail_eagerly();
        if let Some(digest) = s.digest() {
            connector = connector.with_auth("digest", digest);
        }
        let context = format!("connecting to ZooKeeper at {}", s.hosts);
        let connect_started = BootInstant::now();
        let client = connector
            .connect(&s.hosts)
            .await
            .map_err(|e| map_error(&context, e))?;
        let client = if s.chroot.is_empty() {
            client
        } else {
            self.ensure_chroot(&client).await?;
            client.chroot(s.chroot.as_str()).map_err(|_| {
                Error::invalid(format!(
                    "ZooKeeper chroot {:?} is not a valid path",
                    s.chroot
                ))
            })?
        };
        // Read once: the client reports the first connect's negotiated timeout only, though a
        // reconnect may renegotiate it (docs/zookeeper.md, "What the proof assumes").
        let timeout = client.session_timeout();
        if timeout != s.session_timeout {
            flog!(
                info,
                "ZooKeeper negotiated a session timeout of {timeout:?} (asked for {:?})",
                s.session_timeout
            );
        }
        let tick = s.tick(timeout);
        let stages = proof_stages(&client, timeout, tick).await?;
        let generation = self.next_generation.fetch_add(1, Ordering::AcqRel) + 1;
        let states = client.state_watcher();
        let heartbeat = Arc::new(Heartbeat::new(tick, connect_started, stages));
        let session = Arc::new(Session {
            timeout,
            client,
            generation,
            heartbeat: heartbeat.clone(),
        });
        spawn_monitor(&self.runtime, Arc::downgrade(self), generation, states);
        self.runtime.spawn(heartbeat_loop(
            Arc::downgrade(self),
            Arc::downgrade(&session),
            heartbeat,
        ));
        Ok(session)
    }

    /// Creates the chroot (persistent, with the folder ACLs) if it does not exist.
    async fn ensure_chroot(&self, client: &Client) -> Result<()> {
        let chroot = &self.settings.chroot;
        let context = format!("making sure the ZooKeeper chroot {chroot} exists");
        if client
            .check_stat(chroot)
            .await
            .map_err(|e| map_error(&context, e))?
            .is_some()
        {
            return Ok(());
        }
        let acls = self.settings.folder_acls();
        match client
            .mkdir(chroot, &CreateMode::Persistent.with_acls(Acls::new(&acls)))
            .await
        {
            Ok(()) | Err(ZkError::NodeExists) => Ok(()),
            Err(e) => Err(map_error(&context, e)),
        }
    }

    /// The session `generation` ended: its nodes are gone, its leases lost.
    fn session_ended(&self, generation: u64, state: SessionState) {
        let lost: Vec<LeaseEvents> = {
            let mut nodes = unpoisoned(&self.nodes);
            let ended: Vec<OwnerId> = nodes
                .iter()
                .filter(|(_, n)| n.generation == generation)
                .map(|(o, _)| *o)
                .collect();
            ended
                .iter()
                .filter_map(|o| nodes.remove(o))
                .filter_map(|n| n.events)
                .collect()
        };
        if !lost.is_empty() {
            flog!(
                warn,
                "ZooKeeper session ended ({state}): {} lease(s) lost",
                lost.len()
            );
        }
        for events in lost {
            events.lost(LossReason::SessionExpired);
        }
    }

    /// Whether this Locker has lock nodes (waiting or held) on session `generation`.
    fn has_nodes(&self, generation: u64) -> bool {
        unpoisoned(&self.nodes)
            .values()
            .any(|n| n.generation == generation)
    }

    /// The handles of session `generation`'s held leases.
    fn held_leases(&self, generation: u64) -> Vec<LeaseEvents> {
        unpoisoned(&self.nodes)
            .values()
            .filter(|n| n.generation == generation && n.held)
            .filter_map(|n| n.events.clone())
            .collect()
    }

    /// The heartbeat proved session `generation` alive until `from` + its timeout: the client
    /// deadlines of its held, renewing leases move up to it.
    fn advance_leases(&self, generation: u64, from: BootInstant) {
        for e in self.held_leases(generation) {
            e.advance(from);
        }
    }

    fn set_suspended(&self, generation: u64, suspended: bool) {
        for e in self.held_leases(generation) {
            e.set_suspended(suspended);
        }
    }
}

/// Sends one session's heartbeats (see [`heartbeat`](super::heartbeat)) while this Locker has
/// lock nodes on it, and for one session timeout after the last one went, so that locking again
/// soon finds the proof fresh. Ends with the session.
async fn heartbeat_loop(inner: Weak<Inner>, session: Weak<Session>, heartbeat: Arc<Heartbeat>) {
    let pause = heartbeat.gap() / 2;
    let mut busy_at = BootInstant::now();
    loop {
        let Some(this) = session.upgrade() else {
            return;
        };
        if this.is_ended() {
            return;
        }
        let (generation, linger) = (this.generation, this.timeout);
        drop(this);
        let busy = {
            let Some(inner) = inner.upgrade() else { return };
            if inner.closed.load(Ordering::Acquire) {
                return;
            }
            inner.has_nodes(generation)
        };
        if busy {
            busy_at = BootInstant::now();
        } else if busy_at.elapsed() > linger {
            // Idle: sleep until a node is made (checking now and then that the session lives).
            let _ = tokio::time::timeout(Duration::from_secs(1), heartbeat.wake.notified()).await;
            continue;
        }
        let sent = BootInstant::now();
        let outcome = {
            let Some(this) = session.upgrade() else {
                return;
            };
            let mut check = this.client.new_multi_writer();
            match check.add_check_version("/", -1) {
                Ok(()) => tokio::time::timeout(this.timeout, check.commit())
                    .await
                    .map(|r| r.map(drop).map_err(ZkError::from)),
                Err(e) => Ok(Err(e)),
            }
        };
        match outcome {
            Ok(Ok(_)) => {
                let moved = heartbeat.answered(sent, BootInstant::now());
                if let Some(inner) = inner.upgrade() {
                    if let Some(from) = moved {
                        inner.advance_leases(generation, from);
                    }
                    inner.hook("zk_heartbeat_confirmed");
                }
            }
            Ok(Err(e)) if is_session_gone(&e) => {
                heartbeat.failed(map_error("the session heartbeat", e).to_string());
                return;
            }
            Ok(Err(e)) => heartbeat.failed(map_error("the session heartbeat", e).to_string()),
            Err(_) => heartbeat.failed("the session heartbeat got no answer".to_string()),
        }
        tokio::time::sleep(pause).await;
    }
}

/// Spawns [`monitor`]; a plain function, so the async functions that call it do not hold its
/// future (monitor → reconnect → session → connect_session would otherwise be a cycle of
/// opaque types).
fn spawn_monitor(
    runtime: &Handle,
    weak: Weak<Inner>,
    generation: u64,
    states: zookeeper_client::StateWatcher,
) {
    runtime.spawn(monitor(weak, generation, states));
}

/// Follows one session's state: suspends and resumes its leases, and on its end makes them
/// lost and gets a new session.
async fn monitor(weak: Weak<Inner>, generation: u64, mut states: zookeeper_client::StateWatcher) {
    let mut state = states.state();
    loop {
        let Some(inner) = weak.upgrade() else { return };
        match state {
            SessionState::Disconnected => {
                flog!(
                    warn,
                    "disconnected from ZooKeeper; leases are suspended until it reconnects"
                );
                inner.set_suspended(generation, true);
            }
            SessionState::SyncConnected | SessionState::ConnectedReadOnly => {
                inner.set_suspended(generation, false);
                let _ = inner.cleanup.send(Cleanup::Reconnected);
            }
            SessionState::Expired | SessionState::AuthFailed | SessionState::Closed => {
                inner.session_ended(generation, state);
                if !inner.closed.load(Ordering::Acquire) {
                    inner.runtime.spawn(reconnect(Arc::downgrade(&inner)));
                }
                return;
            }
        }
        drop(inner);
        state = states.changed().await;
    }
}

/// Gets a new session after the last one ended, retrying with back-off while the ensemble
/// cannot be reached.
async fn reconnect(weak: Weak<Inner>) {
    let mut delay = Duration::from_millis(100);
    loop {
        let Some(inner) = weak.upgrade() else { return };
        match inner.session().await {
            Ok(_) => return,
            Err(e) if e.code() == crate::error::ErrorCode::Closed => return,
            Err(e) => flog!(warn, "cannot make a new ZooKeeper session yet: {e}"),
        }
        drop(inner);
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

/// How many links the heartbeat's proof takes ([`heartbeat`](super::heartbeat)): two when
/// the ensemble's configuration lists observers, since this session's server may be one that
/// a follower relays (observerMasterPort), which a client cannot tell; one otherwise. A
/// session too short for two links is refused.
async fn proof_stages(client: &Client, timeout: Duration, tick: Duration) -> Result<usize> {
    let config = retry(
        "reading the ZooKeeper ensemble's configuration",
        CONNECTION_KEPT_DROPPING,
        |_| async {
            match client.get_config().await {
                Ok((data, _)) => Ok(Some(String::from_utf8_lossy(&data).into_owned())),
                // No configuration node (a server before 3.5): no observer masters either.
                Err(ZkError::NoNode) => Ok(Some(String::new())),
                // Not readable (its ACL was changed): assume the worst.
                Err(ZkError::NoAuth) => Ok(None),
                Err(e) => Err(Retry::zk(
                    "reading the ZooKeeper ensemble's configuration",
                    e,
                )),
            }
        },
    )
    .await?;
    stages_for(config.as_deref(), timeout, tick)
}

/// How many links the proof takes given the ensemble's configuration (`None`: not readable).
fn stages_for(config: Option<&str>, timeout: Duration, tick: Duration) -> Result<usize> {
    let ensemble = match config.map(observers) {
        Some(listed) if listed.is_empty() => return Ok(1),
        Some(listed) => format!("has observers ({})", listed.join(", ")),
        None => "may have observers (/zookeeper/config is not readable)".to_string(),
    };
    if let Some(least) = heartbeat::too_short_for_two_links(timeout, tick) {
        return Err(Error::invalid(format!(
            "the ZooKeeper ensemble {ensemble}: a lease on a session whose \
             server is an observer relayed by a follower (observerMasterPort) is proven \
             two ticks late, which needs a session timeout of at least {least:?} with a \
             tick of {tick:?}, not {timeout:?}; raise session_timeout_ms (the servers' \
             maxSessionTimeout permitting), or give tick_ms if their tickTime is shorter"
        )));
    }
    flog!(
        info,
        "the ZooKeeper ensemble {ensemble}: lease deadlines count a tick \
         more for a follower's relay"
    );
    Ok(2)
}

/// The servers `/zookeeper/config` lists as observers (`server.4`), from lines like
/// `server.4=10.0.0.4:2888:3888:observer;0.0.0.0:2181` (QuorumPeer.QuorumServer.toString: the
/// role is the last `:` field before the client address).
fn observers(config: &str) -> Vec<&str> {
    config
        .lines()
        .filter_map(|line| line.split_once('='))
        .filter(|(key, _)| key.trim().starts_with("server."))
        .filter(|(_, value)| {
            let before_client = value.split(';').next().unwrap_or_default().trim();
            before_client
                .rsplit(':')
                .next()
                .is_some_and(|role| role.eq_ignore_ascii_case("observer"))
        })
        .map(|(key, _)| key.trim())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observers_are_read_from_the_ensemble_configuration() {
        let config = "server.1=127.0.0.1:2881:3881:participant;127.0.0.1:2281\n\
                      server.2=[::1]:2882:3882:participant\n\
                      server.3=10.0.0.3:2888:3888|10.1.0.3:2888:3888:participant;2181\n\
                      server.4=zk4.example:2888:3888:observer;0.0.0.0:2181\n\
                      server.5=zk5.example:2888:3888:OBSERVER\n\
                      version=100000000\n";
        assert_eq!(observers(config), ["server.4", "server.5"]);
        // The test ensemble's, as ZooKeeper 3.8 writes it; a standalone server's is empty.
        let participants = "server.1=127.0.0.1:2881:3881:participant\n\
                            server.2=127.0.0.1:2882:3882:participant\n\
                            server.3=127.0.0.1:2883:3883:participant\n\
                            version=0";
        assert!(observers(participants).is_empty());
        assert!(observers("").is_empty());
    }

    #[test]
    fn a_listed_observer_makes_the_proof_two_links_or_refuses_a_short_session() {
        let tick = Duration::from_millis(500);
        let with_observer = "server.1=127.0.0.1:2881:3881:participant\n\
                             server.4=127.0.0.1:2884:3884:observer\nversion=0";
        let participants = "server.1=127.0.0.1:2881:3881:participant\nversion=0";
        let two_seconds = Duration::from_secs(2);
        assert_eq!(
            stages_for(Some(participants), two_seconds, tick).unwrap(),
            1
        );
        assert_eq!(stages_for(Some(""), two_seconds, tick).unwrap(), 1);
        assert_eq!(
            stages_for(Some(with_observer), two_seconds, tick).unwrap(),
            2
        );
        // An unreadable configuration may list observers.
        assert_eq!(stages_for(None, two_seconds, tick).unwrap(), 2);
        let refused =
            stages_for(Some(with_observer), Duration::from_millis(1500), tick).unwrap_err();
        assert_eq!(refused.code(), crate::error::ErrorCode::InvalidArgument);
        let message = refused.to_string();
        assert!(
            message.contains("server.4") && message.contains("observerMasterPort"),
            "{message}"
        );
        assert_eq!(
            stages_for(Some(participants), Duration::from_millis(1500), tick).unwrap(),
            1
        );
    }
}
