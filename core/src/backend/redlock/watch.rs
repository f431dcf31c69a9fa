//! Waiting for a release: one subscription per reachable master (each on that master's
//! shared connection, through the single-instance backend's hub), and a wait that ends at the
//! first message from any of them, or at the fallback poll.

use std::future::poll_fn;
use std::task::Poll;
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::ReleaseWatch;
use crate::backend::redis::pubsub::HubWatch;

pub struct AnyOf(pub Vec<HubWatch>);

#[async_trait]
impl ReleaseWatch for AnyOf {
    async fn wait(&mut self, max: Duration) {
        if self.0.is_empty() {
            tokio::time::sleep(max).await;
            return;
        }
        let mut waits: Vec<_> = self.0.iter_mut().map(|w| w.wait(max)).collect();
        poll_fn(|cx| {
            let mut ready = false;
            for wait in waits.iter_mut() {
                ready |= wait.as_mut().poll(cx).is_ready();
            }
            if ready {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }
}
