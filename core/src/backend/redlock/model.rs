//! A randomized model of the Redlock protocol (issue 4): the scripts re-stated over simulated
//! masters with their own clock offsets, message delays and losses, crashes and restarts
//! without persistence, and clients that acquire, hold and release, driven by one seeded
//! random generator so every run is reproducible.
//!
//! The checker looks at the leases in the order they were granted: their tokens must strictly
//! increase, and no lease's validity window (from its grant until its release or its client
//! deadline, whichever is first) may overlap another's. Two test-only switches turn off
//! fencing phase 2 and abstaining; each must make the checker fail, which shows that the
//! protocol's two additions are what keeps it passing. An adversary now and then restarts,
//! right after a release, a master whose counter carries the token just released.
//!
//! The two-round path (issue 31, docs/redlock.md "Two rounds when the quorum agrees") is
//! modelled too: each client proposes a token `p` from its estimate of the fastest master's
//! clock (the server times of the answers it heard, on a clock of its own that may be an hour
//! off and may step by an hour between two attempts), a master adopts `p` only when
//! `max(counter + 1, its time) <= p <= its time + max_skew`, and phase 2 is skipped when
//! eligible masters forming a majority answered the same token. Majority outages (three of the
//! five masters at once, without persistence) come on top of the single crashes. Two more
//! switches make the rule unsafe as a review found it could be: without the cap a client an
//! hour fast hands out tokens no clock reaches, which a majority that restarted then undercuts;
//! counting abstaining masters in the agreeing majority lets it miss the master that carries
//! the previous token. Each must make the checker fail.
//!
//! What is left out: renewals (leases here are held for less than their ttl), rate drift of
//! the masters' clocks (offsets are fixed, within the maximum skew), and the skew exclusion (no
//! master is beyond the skew here).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::health::{abstain_bound, abstains};
use super::settings::RedlockSettings;
use crate::clock::drift_margin;

const N: usize = 5;
const CLIENTS: usize = 4;
const MS: i64 = 1_000;
const SEC: i64 = 1_000_000;
const MAX_SKEW: i64 = 500 * MS;
const MAX_TTL: i64 = 3 * SEC;
/// How long a client waits for one round's answers.
const ROUND: i64 = 5 * MS;

#[derive(Debug, Clone, Copy)]
pub struct Switches {
    pub phase2: bool,
    pub abstain: bool,
    /// Clients propose a token and skip phase 2 when a majority adopted it (the two-round path).
    pub propose: bool,
    /// A master adopts a proposal only up to its own time + max_skew.
    pub cap: bool,
    /// Only eligible (not abstaining) masters count towards the agreeing majority.
    pub agree_among_eligible: bool,
}

impl Switches {
    /// The protocol as built: phase 2 unless the quorum agrees, abstaining, the capped proposal.
    pub const BUILT: Switches = Switches {
        phase2: true,
        abstain: true,
        propose: true,
        cap: true,
        agree_among_eligible: true,
    };
    /// The three-round protocol (phase 2 always), as before issue 31.
    pub const THREE_ROUNDS: Switches = Switches {
        propose: false,
        ..Switches::BUILT
    };
}

#[derive(Debug, Clone, Copy)]
struct Key {
    owner: u64,
    /// The lock's token as the hash stores it (inspect reads it; the model does not).
    #[allow(dead_code)]
    token: u64,
    /// On the master's own clock.
    expires: i64,
}

#[derive(Debug, Clone)]
struct Master {
    /// This master's clock minus the true time.
    offset: i64,
    up: bool,
    boot: i64,
    key: Option<Key>,
    counter: Option<u64>,
}

impl Master {
    fn local(&self, now: i64) -> i64 {
        now + self.offset
    }

    fn live_key(&mut self, now: i64) -> Option<Key> {
        let local = self.local(now);
        if self.key.is_some_and(|k| k.expires <= local) {
            self.key = None;
        }
        self.key
    }

    /// The acquire script: `Some(token)` when granted. `proposal`: the client's token, adopted
    /// when it is at least this master's own `max(counter + 1, time)` and, with `cap`, at most
    /// its time + max_skew.
    fn acquire(
        &mut self,
        now: i64,
        owner: u64,
        ttl: i64,
        proposal: Option<u64>,
        cap: bool,
    ) -> Option<u64> {
        if self.live_key(now).is_some() {
            return None;
        }
        let local = self.local(now);
        let own = (self.counter.unwrap_or(0) + 1).max(local as u64);
        let token = match proposal {
            Some(p) if own <= p && (!cap || p <= (local + MAX_SKEW) as u64) => p,
            _ => own,
        };
        self.counter = Some(token);
        self.key = Some(Key {
            owner,
            token,
            expires: local + ttl,
        });
        Some(token)
    }

    /// Phase 2: if the key is still `owner`'s, counter = max(counter, t).
    fn raise(&mut self, now: i64, owner: u64, t: u64) -> bool {
        match self.live_key(now) {
            Some(k) if k.owner == owner => {
                self.counter = Some(self.counter.unwrap_or(0).max(t));
                self.key = Some(Key { token: t, ..k });
                true
            }
            _ => false,
        }
    }

    fn release(&mut self, now: i64, owner: u64) {
        if self.live_key(now).is_some_and(|k| k.owner == owner) {
            self.key = None;
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Msg {
    /// Phase 1, with the client's proposed token on the two-round path.
    Acquire(Option<u64>),
    Raise(u64),
    Release,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Start {
        client: usize,
    },
    Deliver {
        master: usize,
        client: usize,
        attempt: u64,
        owner: u64,
        msg: Msg,
    },
    RoundEnd {
        client: usize,
        attempt: u64,
    },
    Release {
        client: usize,
        attempt: u64,
    },
    Crash {
        master: usize,
    },
    Restart {
        master: usize,
        /// Whether it schedules the master's next crash (the adversary's crashes do not).
        chain: bool,
    },
    /// Three masters crash at once (a rack's power), all without persistence.
    Outage,
    /// A client's clock is set anew (an operator, a bad NTP server): by up to an hour.
    ClockStep {
        client: usize,
    },
}

/// One answer to a round, with when it reached the client.
#[derive(Debug, Clone, Copy)]
struct Answer {
    master: usize,
    arrives: i64,
    /// Phase 1: the token granted (if any) and the master's uptime; phase 2: yes/no.
    granted: Option<u64>,
    uptime: i64,
    yes: bool,
    /// The master's clock when it answered (the `server_time_usec` of its `INFO server`).
    master_time: i64,
}

#[derive(Debug, Default)]
struct Attempt {
    id: u64,
    owner: u64,
    ttl: i64,
    started: i64,
    phase: u8,
    answers: Vec<Answer>,
    voters: Vec<usize>,
    /// The masters whose counters carry the lease's token (the agreeing ones, or those phase 2
    /// raised): the adversary restarts one of them right after a release.
    carriers: Vec<usize>,
    token: u64,
    lease: Option<usize>,
}

#[derive(Debug, Clone, Copy)]
pub struct Granted {
    pub at: i64,
    pub token: u64,
    /// The end of its validity window: released, or its client deadline.
    pub until: i64,
    /// Granted after phase 1 alone (a majority adopted the proposal).
    pub two_rounds: bool,
}

/// A client's clock, and what it estimates the fastest master's clock to be.
#[derive(Debug, Clone, Copy, Default)]
struct ClientClock {
    /// This client's clock minus the true time.
    offset: i64,
    /// The fastest master's clock minus this client's, as the last answers showed it.
    fastest: Option<i64>,
}

struct Sim {
    rng: StdRng,
    now: i64,
    seq: u64,
    queue: BinaryHeap<Reverse<(i64, u64, Event)>>,
    masters: Vec<Master>,
    attempts: Vec<Attempt>,
    leases: Vec<Granted>,
    switches: Switches,
    next_owner: u64,
    /// When the last message on each client's connection to each master arrives.
    fifo: Vec<[i64; N]>,
    clocks: Vec<ClientClock>,
}

fn quorum() -> usize {
    RedlockSettings::quorum(N)
}

fn us(d: Duration) -> i64 {
    d.as_micros() as i64
}

fn dur(us: i64) -> Duration {
    Duration::from_micros(us.max(0) as u64)
}

impl Sim {
    fn new(seed: u64, switches: Switches) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        // Offsets within ±skew/2, so any two masters are at most the skew apart; half of them
        // at either end, where the clocks' spread is widest.
        let masters = (0..N)
            .map(|_| Master {
                offset: match rng.random_range(0..4) {
                    0 => 0,
                    1 => MAX_SKEW / 2,
                    _ => rng.random_range(-MAX_SKEW / 2..=MAX_SKEW / 2),
                },
                up: true,
                boot: -100 * SEC,
                key: None,
                counter: None,
            })
            .collect();
        let mut sim = Sim {
            rng,
            now: 1_800_000_000 * SEC,
            seq: 0,
            queue: BinaryHeap::new(),
            masters,
            attempts: (0..CLIENTS).map(|_| Attempt::default()).collect(),
            leases: Vec::new(),
            switches,
            next_owner: 1,
            fifo: vec![[0; N]; CLIENTS],
            clocks: Vec::new(),
        };
        sim.clocks = (0..CLIENTS)
            .map(|_| ClientClock {
                offset: sim.client_offset(),
                fastest: None,
            })
            .collect();
        for m in &mut sim.masters {
            m.boot += sim.now;
        }
        for client in 0..CLIENTS {
            let at = sim.rng.random_range(0..50 * MS);
            sim.at(at, Event::Start { client });
        }
        for master in 0..N {
            let at = sim.rng.random_range(0..40 * SEC);
            sim.at(at, Event::Crash { master });
        }
        let outage = sim.rng.random_range(10 * SEC..40 * SEC);
        sim.at(outage, Event::Outage);
        for client in 0..CLIENTS {
            let at = sim.rng.random_range(SEC..30 * SEC);
            sim.at(at, Event::ClockStep { client });
        }
        sim
    }

    /// A client clock's offset: mostly within the skew, sometimes an hour either way.
    fn client_offset(&mut self) -> i64 {
        match self.rng.random_range(0..4) {
            0 => 3600 * SEC,
            1 => -3600 * SEC,
            _ => self.rng.random_range(-MAX_SKEW..=MAX_SKEW),
        }
    }

    /// The token `client` proposes now: its estimate of the fastest master's clock, plus a lead
    /// of up to the skew (estimates are off by that much at worst, and the answer must reach
    /// the fastest master before its clock passes the proposal). Before any estimate, its own
    /// clock, which may be an hour off.
    fn proposal(&mut self, client: usize) -> u64 {
        let clock = self.clocks[client];
        let lead = self.rng.random_range(0..MAX_SKEW);
        (self.now + clock.offset + clock.fastest.unwrap_or(0) + lead).max(1) as u64
    }

    fn at(&mut self, after: i64, event: Event) {
        self.seq += 1;
        self.queue
            .push(Reverse((self.now + after, self.seq, event)));
    }

    /// Sends `msg` to `master`: delayed 0-2 ms, lost 1% of the time, and in order on each
    /// client's connection to each master (a release never overtakes the acquire before it).
    fn send(&mut self, master: usize, client: usize, msg: Msg) {
        if self.rng.random_bool(0.01) {
            return;
        }
        let (attempt, owner) = (self.attempts[client].id, self.attempts[client].owner);
        let arrives = (self.now + self.rng.random_range(0..2 * MS)).max(self.fifo[client][master]);
        self.fifo[client][master] = arrives;
        self.at(
            arrives - self.now,
            Event::Deliver {
                master,
                client,
                attempt,
                owner,
                msg,
            },
        );
    }

    fn run(mut self, horizon: i64) -> Vec<Granted> {
        let end = self.now + horizon;
        while let Some(Reverse((time, _, event))) = self.queue.pop() {
            if time > end {
                break;
            }
            self.now = time;
            self.step(event);
        }
        self.leases
    }

    fn step(&mut self, event: Event) {
        match event {
            Event::Start { client } => self.start(client),
            Event::Deliver {
                master,
                client,
                attempt,
                owner,
                msg,
            } => self.deliver(master, client, attempt, owner, msg),
            Event::RoundEnd { client, attempt } if self.attempts[client].id == attempt => {
                self.round_end(client)
            }
            Event::RoundEnd { .. } => {}
            Event::Release { client, attempt } if self.attempts[client].id == attempt => {
                let lease = self.attempts[client].lease.take().expect("a held lease");
                self.leases[lease].until = self.leases[lease].until.min(self.now);
                for m in 0..N {
                    self.send(m, client, Msg::Release);
                }
                // The adversary: now and then a master that carries the token just released
                // restarts at once, before the next attempt reaches it.
                let carriers = std::mem::take(&mut self.attempts[client].carriers);
                if !carriers.is_empty() && self.rng.random_bool(0.2) {
                    let master = carriers[self.rng.random_range(0..carriers.len())];
                    self.crash(master, MS, false);
                }
                let pause = self.rng.random_range(0..30 * MS);
                self.at(pause, Event::Start { client });
            }
            Event::Release { .. } => {}
            Event::Crash { master } => self.crash(master, 300 * MS, true),
            Event::Outage => {
                let mut masters: Vec<usize> = (0..N).collect();
                for _ in 0..2 {
                    let spared = self.rng.random_range(0..masters.len());
                    masters.swap_remove(spared);
                }
                for master in masters {
                    self.crash(master, 300 * MS, false);
                }
                let next = self.rng.random_range(20 * SEC..60 * SEC);
                self.at(next, Event::Outage);
            }
            Event::ClockStep { client } => {
                self.clocks[client].offset = self.client_offset();
                let next = self.rng.random_range(5 * SEC..30 * SEC);
                self.at(next, Event::ClockStep { client });
            }
            Event::Restart { master, chain } => {
                self.masters[master].up = true;
                self.masters[master].boot = self.now;
                if chain {
                    let next = self.rng.random_range(10 * SEC..40 * SEC);
                    self.at(next, Event::Crash { master });
                }
            }
        }
    }

    /// A crash without persistence: keys and counter gone; back up within `down_at_most`. A
    /// master that is already down stays down until its own restart, which then schedules its
    /// next crash if this one would have (`chain`: each master has one chain of crashes).
    fn crash(&mut self, master: usize, down_at_most: i64, chain: bool) {
        if !self.masters[master].up {
            if chain {
                let next = self.rng.random_range(10 * SEC..40 * SEC);
                self.at(next, Event::Crash { master });
            }
            return;
        }
        let m = &mut self.masters[master];
        m.up = false;
        m.key = None;
        m.counter = None;
        let down = self.rng.random_range(0..down_at_most);
        self.at(down, Event::Restart { master, chain });
    }

    fn start(&mut self, client: usize) {
        let owner = self.next_owner;
        self.next_owner += 1;
        let ttl = self.rng.random_range(MAX_TTL / 2..=MAX_TTL);
        let id = self.attempts[client].id + 1;
        self.attempts[client] = Attempt {
            id,
            owner,
            ttl,
            started: self.now,
            phase: 1,
            ..Attempt::default()
        };
        let proposal = self.switches.propose.then(|| self.proposal(client));
        for m in 0..N {
            self.send(m, client, Msg::Acquire(proposal));
        }
        self.at(
            ROUND,
            Event::RoundEnd {
                client,
                attempt: id,
            },
        );
    }

    fn deliver(&mut self, master: usize, client: usize, attempt: u64, owner: u64, msg: Msg) {
        let now = self.now;
        let back = self.rng.random_range(0..2 * MS);
        let m = &mut self.masters[master];
        if !m.up {
            return;
        }
        // Messages of an older attempt still act on the master (a late grant, a release);
        // only their answers go unheard.
        let (ttl, current) = (
            self.attempts[client].ttl,
            self.attempts[client].id == attempt,
        );
        let cap = self.switches.cap;
        let answer = match msg {
            Msg::Acquire(proposal) => {
                let granted = m.acquire(now, owner, ttl, proposal, cap);
                Answer {
                    master,
                    arrives: now + back,
                    granted,
                    uptime: now - m.boot,
                    yes: false,
                    master_time: m.local(now),
                }
            }
            Msg::Raise(t) => {
                let yes = m.raise(now, owner, t);
                Answer {
                    master,
                    arrives: now + back,
                    granted: None,
                    uptime: now - m.boot,
                    yes,
                    master_time: m.local(now),
                }
            }
            Msg::Release => {
                m.release(now, owner);
                return;
            }
        };
        if current {
            self.attempts[client].answers.push(answer);
        }
    }

    fn round_end(&mut self, client: usize) {
        let now = self.now;
        let q = quorum();
        let switches = self.switches;
        let a = &mut self.attempts[client];
        let heard: Vec<Answer> = a.answers.drain(..).filter(|x| x.arrives <= now).collect();
        let ttl = dur(a.ttl);
        let deadline = a.started + a.ttl - us(drift_margin(ttl, dur(MAX_SKEW)));
        if a.phase != 1 {
            if heard.iter().filter(|x| x.yes).count() >= q && now < deadline {
                a.carriers = heard.iter().filter(|x| x.yes).map(|x| x.master).collect();
                return self.grant(client, deadline, false);
            }
            return self.fail(client);
        }
        // What the client learns of the masters' clocks from the answers it heard.
        let offset = self.clocks[client].offset;
        if let Some(fastest) = heard
            .iter()
            .map(|x| x.master_time - (x.arrives + offset))
            .max()
        {
            self.clocks[client].fastest = Some(fastest);
        }
        let eligible = |x: &&Answer| {
            !switches.abstain || !abstains(dur(x.uptime), dur(MAX_TTL), dur(MAX_SKEW))
        };
        let votes: Vec<(usize, u64)> = heard
            .iter()
            .filter(eligible)
            .filter_map(|x| x.granted.map(|t| (x.master, t)))
            .collect();
        if votes.len() < q {
            return self.fail(client);
        }
        if switches.propose {
            let pool: Vec<u64> = if switches.agree_among_eligible {
                votes.iter().map(|v| v.1).collect()
            } else {
                heard.iter().filter_map(|x| x.granted).collect()
            };
            let agreed = pool
                .iter()
                .copied()
                .find(|t| pool.iter().filter(|u| *u == t).count() >= q);
            if let Some(t) = agreed {
                if now >= deadline {
                    return self.fail(client);
                }
                let a = &mut self.attempts[client];
                a.token = t;
                a.carriers = votes.iter().filter(|v| v.1 == t).map(|v| v.0).collect();
                return self.grant(client, deadline, true);
            }
        }
        let a = &mut self.attempts[client];
        a.token = votes.iter().map(|v| v.1).max().unwrap_or(0);
        a.voters = votes.iter().map(|v| v.0).collect();
        if !switches.phase2 {
            a.carriers = a.voters.clone();
            return self.grant(client, deadline, false);
        }
        a.phase = 2;
        let (id, t, voters) = (a.id, a.token, a.voters.clone());
        for m in voters {
            self.send(m, client, Msg::Raise(t));
        }
        self.at(
            ROUND,
            Event::RoundEnd {
                client,
                attempt: id,
            },
        );
    }

    fn grant(&mut self, client: usize, deadline: i64, two_rounds: bool) {
        let now = self.now;
        let token = self.attempts[client].token;
        self.leases.push(Granted {
            at: now,
            token,
            until: deadline,
            two_rounds,
        });
        self.attempts[client].lease = Some(self.leases.len() - 1);
        let id = self.attempts[client].id;
        // Mostly released within the validity (half of those at once: a short critical
        // section); sometimes left to expire.
        if self.rng.random_bool(0.9) && deadline > now {
            let longest = if self.rng.random_bool(0.5) {
                MS
            } else {
                300 * MS
            };
            let hold = self.rng.random_range(0..=(deadline - now).min(longest));
            self.at(
                hold,
                Event::Release {
                    client,
                    attempt: id,
                },
            );
        } else {
            self.attempts[client].lease = None;
            let after = (deadline - now).max(0) + self.rng.random_range(0..30 * MS);
            self.at(after, Event::Start { client });
        }
    }

    fn fail(&mut self, client: usize) {
        for m in 0..N {
            self.send(m, client, Msg::Release);
        }
        self.attempts[client].id += 1;
        let retry = self.rng.random_range(0..50 * MS);
        self.at(retry, Event::Start { client });
    }
}

/// What the checker found wrong, if anything.
pub fn check(leases: &[Granted]) -> Result<(), String> {
    let mut by_grant = leases.to_vec();
    by_grant.sort_by_key(|l| l.at);
    let mut busy_until = i64::MIN;
    for (i, pair) in by_grant.windows(2).enumerate() {
        if pair[1].token <= pair[0].token {
            return Err(format!(
                "lease {} got token {} after token {}",
                i + 1,
                pair[1].token,
                pair[0].token
            ));
        }
        busy_until = busy_until.max(pair[0].until);
        if pair[1].at < busy_until {
            return Err(format!(
                "lease {} was granted {} µs before an earlier one ended",
                i + 1,
                busy_until - pair[1].at
            ));
        }
    }
    Ok(())
}

pub fn run(seed: u64, switches: Switches, horizon: Duration) -> Vec<Granted> {
    Sim::new(seed, switches).run(us(horizon))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEEDS: u64 = 12;
    const HORIZON: Duration = Duration::from_secs(120);

    struct Outcome {
        failed: u64,
        granted: usize,
        two_rounds: usize,
        why: Vec<String>,
    }

    fn failures(switches: Switches) -> Outcome {
        failures_over(switches, SEEDS, HORIZON)
    }

    fn failures_over(switches: Switches, seeds: u64, horizon: Duration) -> Outcome {
        let mut outcome = Outcome {
            failed: 0,
            granted: 0,
            two_rounds: 0,
            why: Vec::new(),
        };
        for seed in 0..seeds {
            let leases = run(seed, switches, horizon);
            outcome.granted += leases.len();
            outcome.two_rounds += leases.iter().filter(|l| l.two_rounds).count();
            if let Err(e) = check(&leases) {
                outcome.failed += 1;
                outcome.why.push(format!("seed {seed}: {e}"));
            }
        }
        outcome
    }

    /// The protocol as built and the three-round one before it keep tokens increasing and
    /// leases apart, through clients an hour off, clock steps and majority outages.
    #[test]
    fn the_protocol_keeps_tokens_increasing_and_leases_apart() {
        for switches in [Switches::BUILT, Switches::THREE_ROUNDS] {
            let outcome = failures(switches);
            assert_eq!(outcome.failed, 0, "{switches:?}: {:?}", outcome.why);
            assert!(
                outcome.granted > 1000,
                "only {} leases in {SEEDS} runs: the model is not exercising much",
                outcome.granted
            );
            if switches.propose {
                // Many leases take two rounds; the rest fall back to phase 2: a proposal some
                // master refused (the model's clocks spread over the whole skew and its
                // estimates err by up to the skew, its worst case; on real masters whose
                // clocks agree, nearly every uncontended lease takes two rounds).
                assert!(
                    outcome.two_rounds * 3 > outcome.granted,
                    "{} of {} leases in two rounds",
                    outcome.two_rounds,
                    outcome.granted
                );
                assert!(outcome.two_rounds < outcome.granted, "phase 2 never ran");
            } else {
                assert_eq!(outcome.two_rounds, 0);
            }
        }
        // Reproducible: the same seed gives the same run.
        let a = run(7, Switches::BUILT, Duration::from_secs(20));
        let b = run(7, Switches::BUILT, Duration::from_secs(20));
        assert_eq!(
            a.iter().map(|l| (l.at, l.token)).collect::<Vec<_>>(),
            b.iter().map(|l| (l.at, l.token)).collect::<Vec<_>>()
        );
        assert_eq!(
            abstain_bound(dur(MAX_TTL), dur(MAX_SKEW)),
            Duration::from_secs(4)
        );
    }

    fn assert_fails(switches: Switches, what: &str, tokens_only: bool) {
        assert_fails_in(failures(switches), what, tokens_only);
    }

    fn assert_fails_in(outcome: Outcome, what: &str, tokens_only: bool) {
        assert!(outcome.failed > 0, "the checker never failed {what}");
        if tokens_only {
            let why = &outcome.why;
            assert!(why.iter().all(|w| w.contains("token")), "{why:?}");
        }
        eprintln!("{what}, {} runs failed: {:?}", outcome.failed, outcome.why);
    }

    #[test]
    fn without_phase_2_tokens_go_backwards() {
        let switches = Switches {
            phase2: false,
            ..Switches::THREE_ROUNDS
        };
        assert_fails(switches, "without phase 2", true);
    }

    #[test]
    fn without_abstaining_leases_overlap_or_tokens_go_backwards() {
        for base in [Switches::BUILT, Switches::THREE_ROUNDS] {
            let switches = Switches {
                abstain: false,
                ..base
            };
            assert_fails(switches, "without abstaining", false);
        }
    }

    /// A client an hour fast proposes a token no master's clock reaches for an hour; adopted
    /// without the cap, it is undercut once a majority restarted without it.
    #[test]
    fn without_the_cap_a_fast_client_s_tokens_are_undercut() {
        let switches = Switches {
            cap: false,
            ..Switches::BUILT
        };
        assert_fails(switches, "without the cap", true);
    }

    /// A master that carried the last token restarts (the adversary restarts one right after
    /// a release, now and then) and abstains; counted, it agrees on a lower proposal with two
    /// masters that never adopted the last token, while the eligible masters that carry it
    /// answered `counter + 1` and are outvoted. Rarer than the others (the two must have
    /// refused the last proposal under the cap and take the next): 200 shorter runs, of which
    /// a few fail.
    #[test]
    fn counting_abstaining_masters_in_the_agreement_lets_tokens_go_backwards() {
        let switches = Switches {
            agree_among_eligible: false,
            ..Switches::BUILT
        };
        let outcome = failures_over(switches, 200, Duration::from_secs(60));
        assert_fails_in(outcome, "counting abstaining masters", true);
    }
}
