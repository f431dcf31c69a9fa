//! Ending a lease on the server, and extending it: the lease operations that talk to the
//! backend on the caller's behalf.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use super::state::{LeaseShared, Phase};
use crate::backend::Renewal;
use crate::clock::BootInstant;
use crate::error::{Error, Result};
use crate::events::LockEventKind;
use crate::options::validate_ttl;
use crate::signal::LossReason;
use crate::spans::{LeaseFacts, SpanKind};
use crate::sync::unpoisoned;

impl LeaseShared {
    pub(crate) async fn release(self: &Arc<Self>) -> Result<()> {
        let Some(spans) = &self.spans else {
            return self.release_untraced().await;
        };
        let started = spans.start();
        let result = self.release_untraced().await;
        let outcome = result.as_ref().map(|()| "released");
        spans.lease_operation(SpanKind::Release, started, self.span_facts(), outcome);
        result
    }

    /// What a span says of this lease.
    pub(super) fn span_facts(&self) -> LeaseFacts<'_> {
        LeaseFacts {
            lock: self.name.as_str(),
            mode: self.mode.as_str(),
            token: Some(self.token),
            lease: self.id,
        }
    }

    async fn release_untraced(self: &Arc<Self>) -> Result<()> {
        if self.inherited_across_fork() {
            return self.ensure_held();
        }
        let phase = {
            let mut state = unpoisoned(&self.state);
            let phase = match state.phase {
                Phase::Held if state.deadline.has_passed() => Phase::Lost(LossReason::Expired),
                phase => phase,
            };
            if phase == Phase::Held {
                state.phase = Phase::Released;
            }
            phase
        };
        match phase {
            Phase::Released => return self.ensure_held(),
            Phase::Lost(LossReason::Expired) => {
                self.mark_lost(LossReason::Expired);
                // The row may still name us: clean up so the next holder need not wait for
                // the server's expiry. The caller still hears LOST.
                if !self.release_sent.swap(true, Ordering::AcqRel) {
                    let _ = self
                        .with_timeout(
                            "release",
                            self.backend.release(&self.name, self.mode, self.owner),
                        )
                        .await;
                }
                self.unregister();
                return self.ensure_held();
            }
            Phase::Lost(_) => {
                self.unregister();
                return self.ensure_held();
            }
            Phase::Held => {}
        }
        self.release_sent.store(true, Ordering::Release);
        self.unregister();
        if self.pipelined_release {
            self.release_pipelined().await;
            return Ok(());
        }
        let ours = self.release_with_retries().await?;
        if ours {
            self.emit(LockEventKind::Released, None, None);
        } else {
            self.signal.fire(LossReason::TakenOver);
            self.emit_lost(LossReason::TakenOver);
            return Err(Error::lost(format!(
                "lock {:?} was no longer ours when released: {}",
                self.name.as_str(),
                LossReason::TakenOver
            )));
        }
        Ok(())
    }

    /// Starts the release here, so its command is queued on the connection before the caller's
    /// next one, and lets the runtime finish it and check the reply.
    async fn release_pipelined(self: &Arc<Self>) {
        let lease = self.clone();
        let mut finish = Box::pin(async move {
            match lease.release_with_retries().await {
                Ok(true) => lease.emit(LockEventKind::Released, None, None),
                Ok(false) => {
                    flog!(
                        warn,
                        lock = lease.name,
                        "pipelined release found the lock no longer ours"
                    );
                    lease.signal.fire(LossReason::TakenOver);
                    lease.emit_lost(LossReason::TakenOver);
                }
                Err(e) => {
                    flog!(
                        warn,
                        lock = lease.name,
                        "pipelined release failed ({e}); the lock expires at its ttl"
                    );
                }
            }
        });
        // On a host event loop's thread (Node's) the first poll may start the round trip on a
        // caller-driven socket, whose reply only that loop is asked to watch: a task on the
        // runtime would not be woken for it, and would end at the operation timeout as a failed
        // release. There the release is awaited where it started; like a blocking caller's on
        // that socket, it saves nothing (docs/design.md §8.4).
        if crate::caller::caller() == crate::caller::Caller::EventLoop {
            finish.await;
            return;
        }
        // One poll sends the command (on Redis it is queued on the shared connection); the rest
        // (the reply) is awaited in the background.
        let sent =
            std::future::poll_fn(|cx| std::task::Poll::Ready(finish.as_mut().poll(cx))).await;
        if sent.is_pending() {
            self.runtime.spawn(finish);
        }
    }

    /// A release that fails fast (a connection being re-established) is tried twice more,
    /// so a lock is not left to expire for a blip; a backend that hangs costs one timeout.
    async fn release_with_retries(&self) -> Result<bool> {
        let mut attempt = 0;
        loop {
            let started = BootInstant::now();
            match self
                .with_timeout(
                    "release",
                    self.backend.release(&self.name, self.mode, self.owner),
                )
                .await
            {
                Err(e)
                    if e.is_retryable()
                        && attempt < 2
                        && started.elapsed() < Duration::from_millis(500) =>
                {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
                }
                result => return result,
            }
        }
    }

    pub(crate) async fn extend(self: &Arc<Self>, ttl: Option<Duration>) -> Result<()> {
        let Some(spans) = &self.spans else {
            return self.extend_untraced(ttl).await;
        };
        let started = spans.start();
        let result = self.extend_untraced(ttl).await;
        let outcome = result.as_ref().map(|()| "extended");
        spans.lease_operation(SpanKind::Extend, started, self.span_facts(), outcome);
        result
    }

    async fn extend_untraced(self: &Arc<Self>, ttl: Option<Duration>) -> Result<()> {
        self.ensure_held()?;
        let ttl = match ttl {
            Some(ttl) => {
                validate_ttl(ttl)?;
                // A backend whose liveness is its session (ZooKeeper) keeps its own length.
                self.backend.lease_ttl(ttl)
            }
            None => unpoisoned(&self.state).ttl,
        };
        let _turn = self.renewing.lock().await;
        self.ensure_held()?;
        let sent_at = BootInstant::now();
        let sent_wall = SystemTime::now();
        match self
            .with_timeout(
                "extend",
                self.backend.renew(&self.name, self.mode, self.owner, ttl),
            )
            .await?
        {
            Renewal::Renewed => {
                self.confirm(sent_at, sent_wall, ttl);
                self.ensure_held()
            }
            Renewal::NotOurs => {
                self.mark_lost(LossReason::TakenOver);
                self.ensure_held()
            }
        }
    }
}
