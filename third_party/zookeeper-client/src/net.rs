//! fencelock's fork: the session's socket and timers on tokio's own driver.
//!
//! Upstream 0.11.2 reads its socket and runs its timers on async-io's reactor, a thread of its
//! own, which then wakes the session task on tokio: one more thread hand-off per reply than a
//! socket registered with tokio, which the worker that polls the session task reads itself.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::time::{Interval, MissedTickBehavior};
use tokio_util::compat::{Compat, TokioAsyncReadCompatExt};

/// A TCP connection seen through the `futures` I/O traits the session is written against.
pub type TcpStream = Compat<tokio::net::TcpStream>;

pub async fn connect(host: &str, port: u16) -> std::io::Result<TcpStream> {
    Ok(tokio::net::TcpStream::connect((host, port)).await?.compat())
}

pub fn sleep(duration: Duration) -> tokio::time::Sleep {
    tokio::time::sleep(duration)
}

/// Completes every `period`, the first time one `period` from now, with the instant it fired.
pub struct Ticker {
    interval: Interval,
}

impl Ticker {
    pub fn new(period: Duration) -> Self {
        let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self { interval }
    }
}

impl Future for Ticker {
    type Output = Instant;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Instant> {
        self.get_mut().interval.poll_tick(cx).map(|_| Instant::now())
    }
}
