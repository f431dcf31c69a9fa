//! A randomized model of the Redlock protocol (issue 4): the scripts re-stated over simulated
//! masters with their own clock offsets, message delays and losses, crashes and restarts
//! without persistence, and clients that acquire, hold and release, driven by one seeded
//! random generator so every run is reproducible.
//!
//! The checker looks at the leases in the order they were granted: their tokens must strictly
//! increase, and no lease's validity window (from its grant until its release or its client
//! deadline, whichever is first) may overlap another's. Two test-only switches turn off
//! fencing phase 2 and abstaining; each must make the checker fail, which shows that the
//! protocol's two additions are what keeps it passing.
//!
//! What is left out: renewals (leases here are held for less than their ttl), rate drift of
//! the clocks (offsets are fixed, within the maximum skew), and the skew exclusion (no master
//! is beyond the skew here).

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

    /// The acquire script: `Some(token)` when granted.
    fn acquire(&mut self, now: i64, owner: u64, ttl: i64) -> Option<u64> {
        if self.live_key(now).is_some() {
            return None;
        }
        let local = self.local(now);
        let token = (self.counter.unwrap_or(0) + 1).max(local as u64);
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
    Acquire,
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
    token: u64,
    lease: Option<usize>,
}

#[derive(Debug, Clone, Copy)]
pub struct Granted {
    pub at: i64,
    pub token: u64,
    /// The end of its validity window: released, or its client deadline.
    pub until: i64,
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
        // Offsets within ±skew/2, so any two masters are at most the skew apart.
        let masters = (0..N)
            .map(|_| Master {
                offset: rng.random_range(-MAX_SKEW / 2..=MAX_SKEW / 2),
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
        };
        for m in &mut sim.masters {
            m.boot += sim.now;
        }
        for client in 0..CLIENTS {
            let at = sim.rng.random_range(0..50 * MS);
            sim.at(at, Event::Start { client });
        }
        for master in 0..N {
            let at = sim.rng.random_range(0..20 * SEC);
            sim.at(at, Event::Crash { master });
        }
        sim
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
                let pause = self.rng.random_range(0..30 * MS);
                self.at(pause, Event::Start { client });
            }
            Event::Release { .. } => {}
            Event::Crash { master } => {
                let m = &mut self.masters[master];
                m.up = false;
                m.key = None;
                m.counter = None;
                let down = self.rng.random_range(0..300 * MS);
                self.at(down, Event::Restart { master });
            }
            Event::Restart { master } => {
                self.masters[master].up = true;
                self.masters[master].boot = self.now;
                let next = self.rng.random_range(3 * SEC..20 * SEC);
                self.at(next, Event::Crash { master });
            }
        }
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
        for m in 0..N {
            self.send(m, client, Msg::Acquire);
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
        let answer = match msg {
            Msg::Acquire => {
                let granted = m.acquire(now, owner, ttl);
                Answer {
                    master,
                    arrives: now + back,
                    granted,
                    uptime: now - m.boot,
                    yes: false,
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
        let abstain = self.switches.abstain;
        let a = &mut self.attempts[client];
        let heard: Vec<Answer> = a.answers.drain(..).filter(|x| x.arrives <= now).collect();
        let ttl = dur(a.ttl);
        let deadline = a.started + a.ttl - us(drift_margin(ttl, dur(MAX_SKEW)));
        match a.phase {
            1 => {
                let votes: Vec<(usize, u64)> = heard
                    .iter()
                    .filter(|x| !abstain || !abstains(dur(x.uptime), dur(MAX_TTL), dur(MAX_SKEW)))
                    .filter_map(|x| x.granted.map(|t| (x.master, t)))
                    .collect();
                if votes.len() >= q {
                    a.token = votes.iter().map(|v| v.1).max().unwrap_or(0);
                    a.voters = votes.iter().map(|v| v.0).collect();
                    if self.switches.phase2 {
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
                        return;
                    }
                    return self.grant(client, deadline);
                }
                self.fail(client);
            }
            _ => {
                if heard.iter().filter(|x| x.yes).count() >= q && now < deadline {
                    return self.grant(client, deadline);
                }
                self.fail(client);
            }
        }
    }

    fn grant(&mut self, client: usize, deadline: i64) {
        let now = self.now;
        let token = self.attempts[client].token;
        self.leases.push(Granted {
            at: now,
            token,
            until: deadline,
        });
        self.attempts[client].lease = Some(self.leases.len() - 1);
        let id = self.attempts[client].id;
        // Mostly released within the validity; sometimes left to expire.
        if self.rng.random_bool(0.9) && deadline > now {
            let hold = self.rng.random_range(0..=(deadline - now).min(300 * MS));
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

    fn failures(switches: Switches) -> (u64, usize, Vec<String>) {
        let mut failed = 0;
        let mut granted = 0;
        let mut why = Vec::new();
        for seed in 0..SEEDS {
            let leases = run(seed, switches, HORIZON);
            granted += leases.len();
            if let Err(e) = check(&leases) {
                failed += 1;
                why.push(format!("seed {seed}: {e}"));
            }
        }
        (failed, granted, why)
    }

    #[test]
    fn the_protocol_keeps_tokens_increasing_and_leases_apart() {
        let (failed, granted, why) = failures(Switches {
            phase2: true,
            abstain: true,
        });
        assert_eq!(failed, 0, "{why:?}");
        assert!(
            granted > 1000,
            "only {granted} leases in {SEEDS} runs: the model is not exercising much"
        );
        // Reproducible: the same seed gives the same run.
        let a = run(
            7,
            Switches {
                phase2: true,
                abstain: true,
            },
            Duration::from_secs(20),
        );
        let b = run(
            7,
            Switches {
                phase2: true,
                abstain: true,
            },
            Duration::from_secs(20),
        );
        assert_eq!(
            a.iter().map(|l| (l.at, l.token)).collect::<Vec<_>>(),
            b.iter().map(|l| (l.at, l.token)).collect::<Vec<_>>()
        );
        assert_eq!(
            abstain_bound(dur(MAX_TTL), dur(MAX_SKEW)),
            Duration::from_secs(4)
        );
    }

    #[test]
    fn without_phase_2_tokens_go_backwards() {
        let (failed, _, why) = failures(Switches {
            phase2: false,
            abstain: true,
        });
        assert!(failed > 0, "the checker never failed without phase 2");
        assert!(why.iter().all(|w| w.contains("token")), "{why:?}");
        eprintln!("without phase 2, {failed} of {SEEDS} runs failed: {why:?}");
    }

    #[test]
    fn without_abstaining_leases_overlap_or_tokens_go_backwards() {
        let (failed, _, why) = failures(Switches {
            phase2: true,
            abstain: false,
        });
        assert!(failed > 0, "the checker never failed without abstaining");
        eprintln!("without abstaining, {failed} of {SEEDS} runs failed: {why:?}");
    }
}
