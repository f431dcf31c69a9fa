//! The session heartbeat: a write every few hundred milliseconds while the Locker has lock
//! nodes, from which the backend proves until when the ZooKeeper leader keeps the session, and
//! so every lease of it. docs/zookeeper.md ("The client deadline") gives the argument, with the
//! server code it rests on; in short:
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
//!
//! An observer attached to a follower through `observerMasterPort` (ObserverMaster) adds a
//! hop: its ping replies go to the follower, which passes them on in its own. There a, b, c
//! only prove that the *follower* had a's touch before it answered c, and a second link
//! (c, d a gap after c's answer, e after d's answer) proves that the leader has it: the proof
//! then takes two links (`stages`), about one tick more, chosen when the ensemble's
//! configuration lists observers (a client cannot tell which server it is on).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::{BootInstant, drift_margin};
use crate::error::{Error, Result};
use crate::sync::unpoisoned;

/// How many answered heartbeats are remembered: enough to find `a` for any `c`, two links back
/// (about eight heartbeats).
const KEPT: usize = 16;

/// The proof's state: answered heartbeats and the instant proven so far.
pub(super) struct Chain {
    /// The least time between a's answer and b's send: half a tick (the leader's ping period),
    /// an eighth of a tick for the leader's scheduling, and the clocks' rates.
    gap: Duration,
    /// How many links of a → b → c the proof takes: one when the session's server answers the
    /// leader's pings itself, two when it may be an observer whose touches a follower relays
    /// (observerMasterPort): a chain only proves that the next server up has a's touch.
    stages: usize,
    /// Answered heartbeats, oldest first: (sent, answered).
    answered: VecDeque<(BootInstant, BootInstant)>,
    /// The session expires on the leader no earlier than this + the session timeout.
    proven_from: BootInstant,
}

impl Chain {
    /// A new session: the leader added it when it committed the session's creation, after
    /// `connect_started`. `stages`: how many links the proof takes (1 or 2, see the field).
    pub(super) fn new(tick: Duration, connect_started: BootInstant, stages: usize) -> Self {
        Chain {
            gap: tick * 2 / 3,
            stages: stages.max(1),
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

    /// One link: for a heartbeat c sent at `c_sent`, the send time of its a: b is the last
    /// heartbeat answered before c was sent, a the last one answered a gap or more before b
    /// was sent. The server that answered a passed a's touch up before it answered c.
    fn link(&self, c_sent: BootInstant) -> Option<BootInstant> {
        let b = self
            .answered
            .iter()
            .rposition(|&(_, answered)| answered <= c_sent)?;
        let b_sent = self.answered[b].0;
        self.answered
            .iter()
            .take(b)
            .rev()
            .find(|(_, a_answered)| {
                a_answered
                    .checked_add(self.gap)
                    .is_some_and(|earliest_b| earliest_b <= b_sent)
            })
            .map(|&(a_sent, _)| a_sent)
    }

    /// Records heartbeat c (sent, answered in order after the last one) and returns the new
    /// proven instant if it moved: c's a after one link, that a's a after two.
    pub(super) fn answered(&mut self, sent: BootInstant, at: BootInstant) -> Option<BootInstant> {
        let mut from = Some(sent);
        for _ in 0..self.stages {
            from = from.and_then(|c_sent| self.link(c_sent));
        }
        let moved = from.filter(|&a_sent| a_sent > self.proven_from);
        if let Some(a_sent) = moved {
            self.proven_from = a_sent;
        }
        if self.answered.len() == KEPT {
            self.answered.pop_front();
        }
        self.answered.push_back((sent, at));
        moved
    }
}

/// The least negotiated session timeout a proof of two links leaves room for, if `timeout` is
/// less: three ticks after the drift margin. In steady state (a heartbeat every half gap) such a
/// proof lags two to two and a half ticks behind the last heartbeat, and an acquire waits for
/// a proof that leaves its lease a gap (2/3 tick) of lead (`queue::wait_for_fresh_proof`); with
/// less, acquires would wait for a proof that never comes.
pub(super) fn too_short_for_two_links(timeout: Duration, tick: Duration) -> Option<Duration> {
    let needed = tick.saturating_mul(3);
    if timeout.saturating_sub(drift_margin(timeout, Duration::ZERO)) >= needed {
        return None;
    }
    // T − (T/100 + 2 ms) ≥ needed  ⇔  T ≥ (needed + 2 ms) × 100/99.
    let nanos = (needed + Duration::from_millis(2)).as_nanos() * 100;
    Some(Duration::from_nanos(
        u64::try_from(nanos.div_ceil(99)).unwrap_or(u64::MAX),
    ))
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
    pub(super) fn new(tick: Duration, connect_started: BootInstant, stages: usize) -> Self {
        Heartbeat {
            chain: Mutex::new(Chain::new(tick, connect_started, stages)),
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
        let mut chain = Chain::new(Duration::from_millis(600), at(0), 1);
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
        let mut chain = Chain::new(Duration::from_millis(600), at(0), 1);
        chain.answered(at(100), at(110));
        chain.answered(at(600), at(610));
        // Sent at 605, before b (600) was answered at 610: no proof from it.
        assert_eq!(chain.answered(at(605), at(700)), None);
        // Sent after 700: b = the one answered at 700 (sent 605); a answered by 205: sent 100.
        assert_eq!(chain.answered(at(710), at(720)), Some(at(100)));
    }

    #[test]
    fn the_proof_starts_at_the_connect_and_never_goes_back() {
        let mut chain = Chain::new(Duration::from_millis(600), at(500), 1);
        assert_eq!(chain.proven_from(), at(500));
        chain.answered(at(100), at(110));
        chain.answered(at(600), at(610));
        assert_eq!(chain.answered(at(620), at(630)), None);
        assert_eq!(chain.proven_from(), at(500));
    }

    #[test]
    fn behind_an_observer_master_the_proof_takes_two_chains() {
        // a, b a gap after a's answer, c after b's answer: proves a's send time when the
        // session's server answers the leader's pings itself...
        let direct = |chain: &mut Chain| {
            assert_eq!(chain.answered(at(100), at(110)), None);
            assert_eq!(chain.answered(at(520), at(530)), None);
            chain.answered(at(540), at(550))
        };
        assert_eq!(
            direct(&mut Chain::new(Duration::from_millis(600), at(0), 1)),
            Some(at(100))
        );
        // ...but not when it is an observer whose touches a follower relays: c only proves
        // that the follower has a's touch.
        let mut chain = Chain::new(Duration::from_millis(600), at(0), 2);
        assert_eq!(direct(&mut chain), None);
        // d, a gap after c's answer, and e after d's answer: the leader has it.
        assert_eq!(chain.answered(at(900), at(910)), None);
        assert_eq!(chain.answered(at(960), at(970)), None);
        assert_eq!(chain.answered(at(980), at(990)), Some(at(100)));
        assert_eq!(chain.proven_from(), at(100));
    }

    #[test]
    fn a_proof_of_two_links_needs_three_ticks_after_the_margin() {
        let tick = Duration::from_millis(500);
        // The test ensemble's: 2 s sessions, 500 ms ticks.
        assert_eq!(too_short_for_two_links(Duration::from_secs(2), tick), None);
        let least = too_short_for_two_links(Duration::from_millis(1500), tick).unwrap();
        assert!(least > Duration::from_millis(1500) && least < Duration::from_millis(1600));
        assert_eq!(too_short_for_two_links(least, tick), None);
        // fencelock's defaults: 10 s, and a tick of 3 s assumed.
        assert_eq!(
            too_short_for_two_links(Duration::from_secs(10), Duration::from_secs(3)),
            None
        );
        // A session of two ticks (the tick assumed as half of it) never leaves a gap of lead.
        assert!(too_short_for_two_links(Duration::from_secs(4), Duration::from_secs(2)).is_some());
    }
}
