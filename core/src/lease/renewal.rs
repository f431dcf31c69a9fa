//! The renewal task: one per auto-renewing lease, on the Locker's runtime.

use std::sync::Weak;
use std::time::{Duration, SystemTime};

use super::state::{LeaseShared, Phase};
use crate::backend::Renewal;
use crate::clock::BootInstant;
use crate::events::LockEventKind;
use crate::signal::LossReason;
use crate::sync::unpoisoned;

/// Renews every ttl/3 while the lease is held; retries failures until the client deadline
/// (the watchdog makes the lease lost then, not this task).
pub(super) async fn renew_loop(weak: Weak<LeaseShared>) {
    let mut retry_in: Option<Duration> = None;
    loop {
        // Only the wake-up is kept across the sleep, not the lease: a lease dropped meanwhile
        // is released.
        let (wait, reschedule) = match weak.upgrade() {
            None => return,
            Some(lease) => {
                let wait = match retry_in {
                    Some(d) => d,
                    None => {
                        let state = unpoisoned(&lease.state);
                        (state.ttl / 3).saturating_sub(state.last_sent.elapsed())
                    }
                };
                (wait, lease.reschedule.clone())
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            // Confirmed by an extend (or this task's own renewal): count again from it.
            _ = reschedule.notified() => {
                if retry_in.is_none() {
                    continue;
                }
            }
        }
        let Some(lease) = weak.upgrade() else { return };
        if lease.current_phase() != Phase::Held {
            return;
        }
        if let Some(max_hold) = lease.max_hold
            && lease.acquired_at.elapsed() >= max_hold
        {
            flog!(
                info,
                lock = lease.name,
                "max_hold reached; renewals stop and the lease ends at its deadline"
            );
            return;
        }
        // Held until the outcome is recorded (end of this iteration).
        let _turn = lease.renewing.lock().await;
        if lease.current_phase() != Phase::Held {
            return;
        }
        let ttl = unpoisoned(&lease.state).ttl;
        let sent_at = BootInstant::now();
        let sent_wall = SystemTime::now();
        let outcome = lease
            .with_timeout(
                "renewal",
                lease
                    .backend
                    .renew(&lease.name, lease.mode, lease.owner, ttl),
            )
            .await;
        match outcome {
            Ok(Renewal::Renewed) => {
                lease.confirm(sent_at, sent_wall, ttl);
                retry_in = None;
            }
            Ok(Renewal::NotOurs) => {
                lease.mark_lost(LossReason::TakenOver);
                return;
            }
            Err(e) => {
                {
                    let mut state = unpoisoned(&lease.state);
                    state.renewal_failing = true;
                    if state.phase == Phase::Held {
                        lease.emit(LockEventKind::RenewalRetried, Some(e.to_string()), None);
                    }
                }
                flog!(
                    warn,
                    lock = lease.name,
                    "renewal failed, retrying until the client deadline: {e}"
                );
                retry_in =
                    Some((ttl / 10).clamp(Duration::from_millis(20), Duration::from_secs(1)));
            }
        }
    }
}
