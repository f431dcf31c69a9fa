//! What the benchmark binaries share: statistics, the result table, and the two-contender
//! handoff driver.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long each holder keeps the lock in a handoff run (`BENCH_HOLD_MS` changes it), so the
/// other side is already waiting when it is released.
pub const HOLD_MS: u64 = 2;
/// Untimed handoffs before the timed ones.
pub const WARMUP: usize = 4;

pub fn hold() -> Duration {
    let ms = std::env::var("BENCH_HOLD_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(HOLD_MS);
    Duration::from_millis(ms)
}

pub struct Stats {
    pub per_second: f64,
    pub p50: Duration,
    pub p99: Duration,
}

/// Samples and time spent, summed over rounds.
#[derive(Default)]
pub struct Run {
    samples: Vec<Duration>,
    elapsed: Duration,
}

impl Run {
    pub fn add(&mut self, (samples, elapsed): (Vec<Duration>, Duration)) {
        self.samples.extend(samples);
        self.elapsed += elapsed;
    }

    pub fn stats(mut self) -> Stats {
        self.samples.sort();
        let at = |q: f64| self.samples[((self.samples.len() - 1) as f64 * q) as usize];
        Stats {
            per_second: self.samples.len() as f64 / self.elapsed.as_secs_f64(),
            p50: at(0.5),
            p99: at(0.99),
        }
    }
}

pub fn row(name: &str, s: &Stats, floor: Option<&Stats>) {
    let ratio = floor
        .map(|f| format!("{:.2}x", s.per_second / f.per_second))
        .unwrap_or_else(|| "1.00x".into());
    println!(
        "| {name} | {:.0} | {:.3} | {:.3} | {ratio} |",
        s.per_second,
        s.p50.as_secs_f64() * 1e3,
        s.p99.as_secs_f64() * 1e3
    );
}

pub fn header(what: &str) {
    println!(
        "\n{what}\n\n| workload | ops/s | p50 ms | p99 ms | vs floor |\n|---|---|---|---|---|"
    );
}

/// One side of a handoff run: takes the lock (waiting as its library waits) and gives it back.
pub trait Contender: Send + 'static {
    fn take(&mut self) -> impl Future<Output = ()> + Send;
    fn give(&mut self) -> impl Future<Output = ()> + Send;
}

struct Shared {
    takes: usize,
    released_at: Option<Instant>,
    started: Option<Instant>,
    samples: Vec<Duration>,
}

/// Two contenders hand one lock back and forth; returns the times from each release call to
/// the other side holding the lock, after [`WARMUP`] untimed handoffs.
pub async fn handoff<C: Contender>(sides: [C; 2], handoffs: usize) -> (Vec<Duration>, Duration) {
    let total = WARMUP + 1 + handoffs;
    let shared = Arc::new(Mutex::new(Shared {
        takes: 0,
        released_at: None,
        started: None,
        samples: Vec::with_capacity(handoffs),
    }));
    let (taken_tx, taken_rx) = tokio::sync::watch::channel(0usize);
    let taken_tx = Arc::new(taken_tx);
    let hold = hold();
    let mut tasks = Vec::new();
    for mut side in sides {
        let (shared, taken_tx, mut taken_rx) = (shared.clone(), taken_tx.clone(), taken_rx.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                if shared.lock().unwrap().takes >= total {
                    return side;
                }
                side.take().await;
                let n = {
                    let mut s = shared.lock().unwrap();
                    s.takes += 1;
                    let released_at = s.released_at.take();
                    if s.takes > WARMUP + 1 {
                        s.samples.push(released_at.unwrap().elapsed());
                    } else if s.takes == WARMUP + 1 {
                        s.started = Some(Instant::now());
                    }
                    s.takes
                };
                taken_tx.send_replace(n);
                tokio::time::sleep(hold).await;
                shared.lock().unwrap().released_at = Some(Instant::now());
                side.give().await;
                if n >= total {
                    return side;
                }
                // Ask again only once the other side holds it.
                taken_rx.wait_for(|taken| *taken > n).await.unwrap();
            }
        }));
    }
    drop(taken_rx);
    for t in tasks {
        drop(t.await.unwrap());
    }
    let mut s = shared.lock().unwrap();
    let elapsed = s.started.unwrap().elapsed();
    let samples = std::mem::take(&mut s.samples);
    assert_eq!(samples.len(), handoffs);
    (samples, elapsed)
}
