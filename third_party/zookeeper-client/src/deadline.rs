use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

// fencelock's fork: a tokio timer (`crate::net`) instead of async-io's.
pub struct Deadline {
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    elapsed: bool,
    deadline: Option<Instant>,
}

impl Deadline {
    pub fn never() -> Self {
        Self { timer: None, elapsed: false, deadline: None }
    }

    pub fn until(deadline: Instant) -> Self {
        let timer = Box::pin(tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)));
        Self { timer: Some(timer), elapsed: false, deadline: Some(deadline) }
    }

    pub fn elapsed(&self) -> bool {
        self.elapsed
    }

    /// Remaining timeout.
    pub fn timeout(&self) -> Duration {
        match self.deadline.as_ref() {
            None => Duration::MAX,
            Some(deadline) => deadline.saturating_duration_since(Instant::now()),
        }
    }
}

impl Future for Deadline {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.elapsed {
            // As a fused future: done once, pending after.
            return Poll::Pending;
        }
        match this.timer.as_mut() {
            None => Poll::Pending,
            Some(timer) => timer.as_mut().poll(cx).map(|()| this.elapsed = true),
        }
    }
}
