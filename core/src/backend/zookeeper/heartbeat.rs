//! The session heartbeat: a write every few hundred milliseconds while the Locker has lock
//! nodes, from which the backend proves until when the ZooKeeper leader keeps the session, and
//! so every lease of it. docs/zookeeper.md ("The client deadline") gives the argument; in short:
//!
//! The leader alone expires sessions, at least a session timeout after it last *touched* one.
//! A follower answers reads and pings itself and passes its clients' activity to the leader
//! only inside its replies to the leader's pings (one every tickTime/2), so an answered read
//! proves nothing about the leader. A heartbeat is a `multi` holding one `check` (a write
//! that changes nothing but must be committed by the leader). Take three heartbeats a, b, c,
//! each answered, with b sent at least [`Chain::gap`] after a's answer and c sent after b's
//! answer. Then the leader pinged the follower after it saw a and before it committed b, the
//! follower's reply to that ping (carrying a's touch) went out before it answered b, so before
//! c was forwarded on the same connection, and c reached the leader: the leader touched the
//! session no earlier than a's send time. Hence the session expires no earlier than a's send
//! time + the session timeout. A reconnect between them only helps (a follower revalidates a
//! moved session with the leader, which touches it).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::BootInstant;
use crate::error::{Error, Result};
use crate::sync::unpoisoned;

/// How many answered heartbeats are remembered: enough to find `a` for any `b`.
const KEPT: usize = 16;

/// The proof's state: answered heartbeats and the instant proven so far.
pub(super) struct Chain {
    /// The least time between a's answer and b's send: half a tick (the leader's ping period),
    /// an eighth of a tick for the leader's scheduling, and the clocks' rates.
    gap: Duration,
    /// Answered heartbeats, oldest first: (sent, answered).
    answered: VecDeque<(BootInstant, BootInstant)>,
    /// The session expires on the leader no earlier than this + the session timeout.
    proven_from: BootInstant,
}

impl Chain {
    /// A new session: the leader added it when it committed the session's creation, after
    /// `connect_started`.
    pub(super) fn new(tick: Duration, connect_started: BootInstant) -> Self {
        Chain {
            gap: tick * 2 / 3,
            answered: VecDeque::with_capacity(KEPT),
            proven_from: connect_started,
        }
    }

    /// The least time between a's answer and b's send.
    pub(super) fn gap(&self) -> Duration {
        self.gap
    }

    pub(super) fn proven_from(&self) -> BootInstant {
        self.proven_from
    }

    /// Records heartbeat c (sent, answered in order after the last one) and returns the new
    /// proven instant if it moved.
    pub(super) fn answered(&mut self, sent: BootInstant, at: BootInstant) -> Option<BootInstant> {
        let mut moved = None;
        // b: the last heartbeat answered before c was sent.
        if let Some(&(b_sent, b_answered)) = self.answered.back()
            && b_answered <= sent
        {
            // a: the last heartbeat answered a gap or more before b was sent.
            let a = self
                .answered
                .iter()
                .rev()
                .skip(1)
                .find(|(_, a_answered)| {
                    a_answered
                        .checked_add(self.gap)
                        .is_some_and(|earliest_b| earliest_b <= b_sent)
                })
                .map(|&(a_sent, _)| a_sent);
            if let Some(a_sent) = a
                && a_sent > self.proven_from
            {
                self.proven_from = a_sent;
                moved = Some(a_sent);
            }
        }
        if self.answered.len() == KEPT {
            self.answered.pop_front();
        }
        self.answered.push_back((sent, at));
        moved
    }
}

/// One session's heartbeat as the rest of the backend sees it.
pub(super) struct Heartbeat {
    chain: Mutex<Chain>,
    /// Bumped after every heartbeat, answered or failed, with the failure's text.
    beats: watch::Sender<(u64, Option<String>)>,
    /// Wakes a sleeping heartbeat loop (a node was made).
    pub(super) wake: tokio::sync::Notify,
}

impl Heartbeat {
    pub(super) fn new(tick: Duration, connect_started: BootInstant) -> Self {
        Heartbeat {
            chain: Mutex::new(Chain::new(tick, connect_started)),
            beats: watch::Sender::new((0, None)),
            wake: tokio::sync::Notify::new(),
        }
    }

    pub(super) fn gap(&self) -> Duration {
        unpoisoned(&self.chain).gap()
    }

    pub(super) fn proven_from(&self) -> BootInstant {
        unpoisoned(&self.chain).proven_from()
    }

    /// Records an answered heartbeat; the new proven instant if it moved.
    pub(super) fn answered(&self, sent: BootInstant, at: BootInstant) -> Option<BootInstant> {
        let moved = unpoisoned(&self.chain).answered(sent, at);
        self.beats.send_modify(|(n, error)| {
            *n += 1;
            *error = None;
        });
        moved
    }

    pub(super) fn failed(&self, error: String) {
        self.beats.send_modify(|(n, last)| {
            *n += 1;
            *last = Some(error);
        });
    }

    /// Waits for the next heartbeat's outcome.
    pub(super) async fn next(&self) -> Result<()> {
        let mut beats = self.beats.subscribe();
        beats.borrow_and_update();
        self.wake.notify_one();
        if beats.changed().await.is_err() {
            return Err(Error::unavailable("the ZooKeeper session ended"));
        }
        match &beats.borrow().1 {
            None => Ok(()),
            Some(error) => Err(Error::unavailable(format!(
                "the session heartbeat failed: {error}"
            ))),
        }
    }

    /// Waits until the proof reaches `from` or later (heartbeats failing meanwhile are waited
    /// through; the caller bounds the wait).
    pub(super) async fn proven_since(&self, from: BootInstant) -> BootInstant {
        let mut beats = self.beats.subscribe();
        loop {
            let proven = self.proven_from();
            if proven >= from {
                return proven;
            }
            self.wake.notify_one();
            if beats.changed().await.is_err() {
                return proven;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> BootInstant {
        // Far from boot, so that subtracting never saturates.
        BootInstant::now()
            .saturating_sub(BootInstant::now().since_boot())
            .checked_add(Duration::from_secs(1000) + Duration::from_millis(ms))
            .unwrap()
    }

    #[test]
    fn a_needs_a_gap_before_b_and_b_an_answer_before_c() {
        let mut chain = Chain::new(Duration::from_millis(600), at(0));
        assert_eq!(chain.gap(), Duration::from_millis(400));
        // a: sent 100, answered 110.
        assert_eq!(chain.answered(at(100), at(110)), None);
        // b sent 300: less than the gap after a's answer, so a does not count for it.
        assert_eq!(chain.answered(at(300), at(310)), None);
        // c sent 320 after b (300) answered: b's a would be answered by -100: none.
        assert_eq!(chain.answered(at(320), at(330)), None);
        // d sent 520 after c answered; its b is c (sent 320), whose a must be answered by
        // -80: none yet.
        assert_eq!(chain.answered(at(520), at(530)), None);
        // e: b = d (sent 520), a = answered by 120: the first one, sent 100.
        assert_eq!(chain.answered(at(540), at(550)), Some(at(100)));
        assert_eq!(chain.proven_from(), at(100));
        // f: b = e (sent 540); a answered by 140: still the first one; nothing moves.
        assert_eq!(chain.answered(at(560), at(570)), None);
    }

    #[test]
    fn a_heartbeat_sent_before_the_last_answer_is_not_a_c() {
        let mut chain = Chain::new(Duration::from_millis(600), at(0));
        chain.answered(at(100), at(110));
        chain.answered(at(600), at(610));
        // Sent at 605, before b (600) was answered at 610: no proof from it.
        assert_eq!(chain.answered(at(605), at(700)), None);
        // Sent after 700: b = the one answered at 700 (sent 605); a answered by 205: sent 100.
        assert_eq!(chain.answered(at(710), at(720)), Some(at(100)));
    }

    #[test]
    fn the_proof_starts_at_the_connect_and_never_goes_back() {
        let mut chain = Chain::new(Duration::from_millis(600), at(500));
        assert_eq!(chain.proven_from(), at(500));
        chain.answered(at(100), at(110));
        chain.answered(at(600), at(610));
        assert_eq!(chain.answered(at(620), at(630)), None);
        assert_eq!(chain.proven_from(), at(500));
    }
}
