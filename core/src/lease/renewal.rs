//! Renewals: one schedule per Locker, and one scheduler task on its runtime that sleeps until
//! the earliest lease is due, then renews the due leases together: one
//! [`crate::backend::Backend::renew_many`] per batch, which a backend sends as one request
//! where it can (one script on Redis, one statement on SQL). A lease due a little later (within
//! a twelfth of its ttl, at most [`MAX_EARLY`]) joins the batch early, so a process holding
//! thousands of leases acquired at scattered moments sends a few requests per renewal period,
//! not one per lease. Each lease keeps its own schedule: the next renewal is a third of its
//! ttl after the one that confirmed it.
//!
//! A lease is put on the schedule where it is acquired, often on a blocking caller's thread
//! (Python, the JVM). The scheduler is woken only when a lease comes due before the moment it
//! already sleeps until; otherwise nothing wakes a runtime thread. A task per lease cost one
//! such wake-up per acquire, which on a loaded 2-core machine was a visible share of an
//! uncontended cycle (bench/RESULTS.md, "Caller-driven I/O"). An entry counts only while it is
//! its lease's current one; the others are skipped when they come due, or pruned
//! ([`crate::due`]).

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use tokio::runtime::Handle;
use tokio::sync::Notify;

use super::state::{LeaseShared, Phase};
use crate::backend::{RenewRequest, Renewal};
use crate::clock::BootInstant;
use crate::due::{Due, DueHeap};
use crate::error::Error;
use crate::events::LockEventKind;
use crate::signal::LossReason;
use crate::spans::SpanKind;
use crate::sync::unpoisoned;

/// How much earlier than due a lease may renew to join a batch: a twelfth of its ttl (a
/// quarter of the time between its renewals), at most this.
const MAX_EARLY: Duration = Duration::from_secs(1);

/// The most leases one request renews; a larger batch is split, the parts sent concurrently.
const MAX_BATCH: usize = 500;

fn may_renew_early(ttl: Duration) -> Duration {
    (ttl / 12).min(MAX_EARLY)
}

/// When a failed renewal is tried again: soon, but not in a tight loop.
pub(super) fn retry_interval(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(20), Duration::from_secs(1))
}

/// The renewal schedule of one Locker's leases.
#[derive(Default)]
pub(crate) struct RenewalSchedule {
    state: Mutex<ScheduleState>,
    /// Wakes the scheduler task; shared with it, so the schedule dropping can wake it to end.
    wake: Arc<Notify>,
}

#[derive(Default)]
struct ScheduleState {
    entries: DueHeap<LeaseShared>,
    /// When the scheduler wakes next: `None` while it waits for the first entry (or has not
    /// started). A lease due no earlier needs no wake-up.
    armed: Option<BootInstant>,
    started: bool,
}

/// Whether `entry` is its lease's current one (an ended or rescheduled lease's is not).
fn is_current(entry: &Due<LeaseShared>) -> bool {
    entry
        .item
        .upgrade()
        .is_some_and(|lease| lease.renewal_due() == Some(entry.at))
}

impl Drop for RenewalSchedule {
    fn drop(&mut self) {
        // The scheduler ends when it finds the schedule gone.
        self.wake.notify_one();
    }
}

impl RenewalSchedule {
    /// Puts `lease` on the schedule at `due` (its state already says so: see
    /// [`LeaseShared::schedule_renewal`]); starts the scheduler on `runtime` on first use.
    fn push(self: &Arc<Self>, lease: &Arc<LeaseShared>, due: BootInstant, runtime: &Handle) {
        let (wake, start) = {
            let mut state = unpoisoned(&self.state);
            state.entries.push(due, Arc::downgrade(lease), is_current);
            let start = !std::mem::replace(&mut state.started, true);
            (state.armed.is_none_or(|armed| due < armed), start)
        };
        if start {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                runtime.spawn(run_scheduler(Arc::downgrade(self), self.wake.clone()))
            }));
        } else if wake {
            self.wake.notify_one();
        }
    }

    /// Takes the entries due by `now`, and those due a little later that may renew early
    /// ([`may_renew_early`]), current ones only; arms the next wake-up: the earliest remaining
    /// entry, skipping the stale ones at the top.
    fn take_due(&self, now: BootInstant) -> (Vec<Arc<LeaseShared>>, Option<BootInstant>) {
        let mut state = unpoisoned(&self.state);
        let mut due = Vec::new();
        let mut not_yet = Vec::new();
        let horizon = now.checked_add(MAX_EARLY).unwrap_or(now);
        while let Some(top) = state.entries.peek() {
            if top.at > horizon && is_current(top) {
                break;
            }
            let Some(entry) = state.entries.pop() else {
                break;
            };
            let Some(lease) = entry.item.upgrade() else {
                continue;
            };
            let early_enough = entry.at <= now
                || now.until(entry.at) <= may_renew_early(unpoisoned(&lease.state).ttl);
            if !early_enough {
                if lease.renewal_due() == Some(entry.at) {
                    not_yet.push(entry);
                }
            } else if lease.take_renewal_due(entry.at) {
                due.push(lease);
            }
        }
        for entry in not_yet {
            state.entries.push(entry.at, entry.item, is_current);
        }
        let next = state.entries.peek().map(|top| top.at);
        state.armed = next;
        (due, next)
    }

    pub(crate) fn len(&self) -> usize {
        unpoisoned(&self.state).entries.len()
    }
}

/// The scheduler task: renews the due leases, in batches of at most [`MAX_BATCH`] each in a
/// task of its own, then sleeps until the next is due or an earlier one is scheduled.
async fn run_scheduler(schedule: Weak<RenewalSchedule>, wake: Arc<Notify>) {
    loop {
        let next = {
            let Some(schedule) = schedule.upgrade() else {
                return;
            };
            let (mut due, next) = schedule.take_due(BootInstant::now());
            while !due.is_empty() {
                let rest = due.split_off(due.len().min(MAX_BATCH));
                tokio::spawn(renew_batch(std::mem::replace(&mut due, rest)));
            }
            next
        };
        match next {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep(BootInstant::now().until(at)) => {}
                    _ = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}

impl LeaseShared {
    /// Puts this lease on its Locker's schedule, to renew at `due`; replaces its earlier entry.
    pub(super) fn schedule_renewal(self: &Arc<Self>, due: BootInstant) {
        unpoisoned(&self.state).renewal_due = Some(due);
        self.renewals.push(self, due, &self.runtime);
    }

    /// The renewal due time of this lease's current schedule entry; `None` once it is no
    /// longer held (its entries are then stale).
    fn renewal_due(&self) -> Option<BootInstant> {
        let state = unpoisoned(&self.state);
        if state.phase != Phase::Held {
            return None;
        }
        state.renewal_due
    }

    /// Claims the renewal due at `due` if that is still this lease's current entry.
    fn take_renewal_due(&self, due: BootInstant) -> bool {
        let mut state = unpoisoned(&self.state);
        if state.renewal_due != Some(due) {
            return false;
        }
        state.renewal_due = None;
        true
    }
}

/// Whether `lease` still renews: held, and not past its `max_hold` (then renewals stop and it
/// ends at its deadline).
fn still_renews(lease: &LeaseShared) -> bool {
    if lease.current_phase() != Phase::Held {
        return false;
    }
    if let Some(max_hold) = lease.max_hold
        && lease.acquired_at.elapsed() >= max_hold
    {
        flog!(
            info,
            lock = lease.name,
            "max_hold reached; renewals stop and the lease ends at its deadline"
        );
        return false;
    }
    true
}

/// Renews leases that came due together, as one [`crate::backend::Backend::renew_many`]. A
/// lease whose extend is in flight renews on its own once the extend is done (a renewal and an
/// extend never overlap).
async fn renew_batch(leases: Vec<Arc<LeaseShared>>) {
    let leases: Vec<Arc<LeaseShared>> = leases.into_iter().filter(|l| still_renews(l)).collect();
    if leases.len() <= 1 {
        if let Some(lease) = leases.into_iter().next() {
            renew_once(lease).await;
        }
        return;
    }
    let mut turns = Vec::with_capacity(leases.len());
    let mut batch = Vec::with_capacity(leases.len());
    for lease in &leases {
        match lease.renewing.try_lock() {
            // Released (or lost) since it came due: nothing to renew.
            Ok(_) if lease.current_phase() != Phase::Held => {}
            Ok(turn) => {
                turns.push(turn);
                batch.push(lease);
            }
            Err(_) => {
                tokio::spawn(renew_once(lease.clone()));
            }
        }
    }
    // Read after the turns are held: an extend that ended before may have changed the ttl.
    let ttls: Vec<Duration> = batch.iter().map(|l| unpoisoned(&l.state).ttl).collect();
    let requests: Vec<RenewRequest<'_>> = batch
        .iter()
        .zip(&ttls)
        .map(|(lease, ttl)| RenewRequest {
            name: &lease.name,
            mode: lease.mode,
            owner: lease.owner,
            ttl: *ttl,
        })
        .collect();
    let Some(first) = batch.first() else {
        return;
    };
    let timeout = first.operation_timeout;
    let sent_at = BootInstant::now();
    let sent_wall = SystemTime::now();
    let outcomes =
        match tokio::time::timeout(timeout, first.backend.renew_many(&requests, timeout)).await {
            Ok(outcomes) if outcomes.len() == batch.len() => outcomes,
            Ok(_) => batch
                .iter()
                .map(|_| {
                    Err(Error::internal(
                        "a batch renewal answered for another number of leases",
                    ))
                })
                .collect(),
            Err(_) => batch
                .iter()
                .map(|lease| {
                    Err(Error::unavailable(format!(
                        "renewal of lock {:?} got no answer within {timeout:?}",
                        lease.name.as_str()
                    )))
                })
                .collect(),
        };
    for ((lease, outcome), ttl) in batch.iter().zip(outcomes).zip(ttls) {
        record(lease, outcome, sent_at, sent_wall, ttl);
    }
    drop(turns);
}

/// One renewal of a lease that came due, alone.
async fn renew_once(lease: Arc<LeaseShared>) {
    if !still_renews(&lease) {
        return;
    }
    // Held until the outcome is recorded: a renewal and an extend never overlap.
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
    record(&lease, outcome, sent_at, sent_wall, ttl);
}

/// Records a renewal's outcome: confirmed, the next renewal is a third of the ttl after this
/// send; not ours, the lease is lost; failed, it is tried again soon, until the client deadline
/// (the watchdog makes the lease lost then, not this task).
fn record(
    lease: &Arc<LeaseShared>,
    outcome: crate::error::Result<Renewal>,
    sent_at: BootInstant,
    sent_wall: SystemTime,
    ttl: Duration,
) {
    if let Some(spans) = &lease.spans {
        let facts = lease.span_facts();
        let ended = match &outcome {
            Ok(Renewal::Renewed) => Ok("renewed"),
            Ok(Renewal::NotOurs) => Ok("lost"),
            // Retried until the client deadline: a failure the lease may yet survive.
            Err(_) => Ok("retried"),
        };
        let started = crate::spans::LockSpans::renewal_started(sent_wall);
        spans.lease_operation(SpanKind::Renewal, started, facts, ended);
    }
    match outcome {
        // Confirming schedules the next renewal.
        Ok(Renewal::Renewed) => lease.confirm(sent_at, sent_wall, ttl),
        Ok(Renewal::NotOurs) => lease.mark_lost(LossReason::TakenOver),
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
            let retry_at = BootInstant::now()
                .checked_add(retry_interval(ttl))
                .unwrap_or_else(BootInstant::now);
            lease.schedule_renewal(retry_at);
        }
    }
}
