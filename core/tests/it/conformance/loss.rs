//! How a lease is lost (docs/design.md §1.4, §1.7, §2.2): an operator's forced release and
//! another client's acquire make the holder LOST at its next renewal; without renewal the
//! lease is lost at its client deadline, no later than the moment another client gets the
//! lock; renewals keep a short lease alive for as long as it is held, and `max_hold` stops
//! them; the lost signal fires whatever the observers of the loss do.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock::metrics::{Instrument, Measurement, MetricsSink};
use fencelock::{BootInstant, ErrorCode, Lease, LockOptions, LockerOptions, LossReason};

use crate::conformance::backends::{Target, offers_semaphores};
use crate::conformance::exclusion::close;
use crate::conformance::release::held;
use crate::contract;
use crate::support::unique;

contract!(
    a_forced_release_makes_the_holder_lost_within_one_renewal_interval,
    an_extend_after_a_forced_release_answers_lost,
    without_renewal_the_lease_is_lost_at_its_client_deadline,
    renewals_keep_a_short_lease_alive_past_several_ttls,
    leases_due_together_renew_together_and_one_forced_away_is_lost_alone,
    max_hold_stops_renewals,
    a_panicking_metrics_sink_neither_delays_nor_loses_the_lost_signal,
    a_grant_handled_past_its_deadline_is_never_returned,
);

/// A ttl short enough that losses and renewals come quickly, long enough that a renewal
/// every third of it survives a stall of a second on a busy machine.
const SHORT: Duration = Duration::from_millis(2000);

/// The ttl of a lease that is not renewed, or not for long: nothing can starve, so it can be
/// shorter.
const UNRENEWED: Duration = Duration::from_millis(1000);

/// Generous bound for what must happen "soon" on a slow machine; never a speed claim.
const SOON: Duration = Duration::from_secs(20);

/// A lost lease answers LOST to every call that needs it held.
fn assert_lost(lease: &Lease) {
    assert!(lease.is_lost() && !lease.is_held());
    assert_eq!(lease.ensure_held().unwrap_err().code(), ErrorCode::Lost);
}

async fn a_forced_release_makes_the_holder_lost_within_one_renewal_interval(target: Target) {
    let (holder, operator) = (target.locker().await, target.locker().await);
    let name = unique("forced");
    let lease = holder
        .acquire(
            &name,
            &LockOptions::default().with_ttl(Duration::from_millis(4500)),
        )
        .await
        .unwrap();
    // One renewal interval: a third of the lease's real ttl (on ZooKeeper the session
    // timeout), read from its deadline.
    let interval = BootInstant::now().until(lease.deadline()) / 3;
    let signal = lease.lost_signal();
    operator.force_release(&name).await.unwrap();
    let forced_at = Instant::now();
    // Another client takes the lock; the fencing counter did not move back.
    let next = operator.acquire(&name, &held()).await.unwrap();
    assert!(next.token() > lease.token());
    // Plus a margin for a slow machine. The reason tells the take-over from an expiry.
    let within = interval + Duration::from_secs(3);
    let reason = tokio::time::timeout(within, signal.wait())
        .await
        .unwrap_or_else(|_| panic!("no lost signal within {within:?} of the force release"));
    assert_eq!(reason, LossReason::TakenOver);
    eprintln!("lost {:?} after the force release", forced_at.elapsed());
    assert_lost(&lease);
    assert_eq!(
        lease.extend(None).await.unwrap_err().code(),
        ErrorCode::Lost
    );
    assert_eq!(lease.release().await.unwrap_err().code(), ErrorCode::Lost);
    // The old holder's release touched nothing of the new holder's.
    let info = operator.inspect(&name).await.unwrap();
    assert!(info.held);
    assert_eq!(info.token, Some(next.token()));
    next.release().await.unwrap();
    // Nobody holds it now.
    let free = operator.force_release(&name).await.unwrap_err();
    assert_eq!(free.code(), ErrorCode::NotHeld, "{free}");
    close(vec![holder, operator]).await;
}

/// An extend asks the server: once an operator's forced release has returned, an extend
/// started after it answers LOST, however soon, and whichever server of an ensemble each
/// client is on (a holder's server may not have applied the delete yet).
async fn an_extend_after_a_forced_release_answers_lost(target: Target) {
    let (holder, operator) = (target.locker().await, target.locker().await);
    // Several rounds: on an ensemble the race this closes was lost about one time in fifteen.
    for round in 0..5 {
        let name = unique(&format!("forced-extend-{round}"));
        let lease = holder.acquire(&name, &held()).await.unwrap();
        let signal = lease.lost_signal();
        operator.force_release(&name).await.unwrap();
        let err = lease.extend(None).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::Lost, "round {round}: {err}");
        assert_lost(&lease);
        let reason = tokio::time::timeout(SOON, signal.wait()).await.unwrap();
        assert_eq!(reason, LossReason::TakenOver);
    }
    close(vec![holder, operator]).await;
}

/// A lease that is not renewed ends at its client deadline (on ZooKeeper one session timeout,
/// which is its real ttl): lost, with its signal fired by the watchdog without anybody reading
/// the lease, by the time another client, waiting meanwhile, gets the lock.
async fn without_renewal_the_lease_is_lost_at_its_client_deadline(target: Target) {
    let (holder, other) = (target.locker().await, target.locker().await);
    let name = unique("no-renewal");
    let lease = holder
        .acquire(
            &name,
            &LockOptions::default()
                .with_ttl(UNRENEWED)
                .with_auto_renew(false),
        )
        .await
        .unwrap();
    let deadline = lease.deadline();
    assert!(lease.is_held());
    let waiting = {
        let (other, name) = (other.clone(), name.clone());
        tokio::spawn(async move { other.acquire(&name, &held().with_wait(Some(SOON))).await })
    };
    let next = waiting
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("the lock never freed: {e}"));
    // The client deadline comes before the server lets anybody else in.
    assert!(deadline.has_passed());
    assert_lost(&lease);
    let signal = lease.lost_signal();
    let reason = tokio::time::timeout(SOON, signal.wait())
        .await
        .expect("the lost signal");
    assert_eq!(reason, LossReason::Expired);
    assert!(next.token() > lease.token());
    // An extend never brings an expired lease back, nor takes the lock from its new holder.
    let extended = lease.extend(Some(Duration::from_secs(10))).await;
    assert_eq!(extended.unwrap_err().code(), ErrorCode::Lost);
    assert_eq!(lease.release().await.unwrap_err().code(), ErrorCode::Lost);
    assert_eq!(
        other.inspect(&name).await.unwrap().token,
        Some(next.token())
    );
    next.release().await.unwrap();
    close(vec![holder, other]).await;
}

/// Renewals (every third of the ttl) keep a short lease held for several ttls, and the server
/// agrees; so they do a lease extended to a shorter ttl: the renewals follow the ttl the extend
/// set (a renewal still due at a third of the old ttl would come after the new deadline).
async fn renewals_keep_a_short_lease_alive_past_several_ttls(target: Target) {
    let (locker, other) = (target.locker().await, target.locker().await);
    let (short, shortened) = (unique("short"), unique("shortened"));
    let a = locker
        .acquire(&short, &LockOptions::default().with_ttl(SHORT))
        .await
        .unwrap();
    let b = locker.acquire(&shortened, &held()).await.unwrap();
    b.extend(Some(SHORT)).await.unwrap();
    stay_held_for_three_ttls(&[&a, &b]).await;
    for lease in [&a, &b] {
        let name = lease.name();
        assert!(other.try_acquire(name, &held()).await.unwrap().is_none());
        // Where the server keeps the expiry, it follows the short ttl.
        if let Some(left) = other.inspect(name).await.unwrap().time_left {
            assert!(left <= SHORT, "{name}: the server expires it in {left:?}");
        }
        lease.release().await.unwrap();
    }
    close(vec![locker, other]).await;
}

/// Watches `leases` (of ttl [`SHORT`]) for three ttls: each must stay held throughout, which
/// only renewals can do.
async fn stay_held_for_three_ttls(leases: &[&Lease]) {
    let started = Instant::now();
    while started.elapsed() < SHORT * 3 {
        for lease in leases {
            assert!(
                lease.is_held(),
                "{} lost {:?} into a hold of {SHORT:?} leases: {:?}",
                lease.name(),
                started.elapsed(),
                lease.lost_signal().reason()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A Locker's leases that come due together renew together (one request per batch on Redis
/// and SQL: docs/design.md §3.1): mutexes, and a semaphore permit where the backend offers
/// them, stay held past several ttls, while one mutex among them, forced away and taken by
/// another client, is lost alone, taken over.
async fn leases_due_together_renew_together_and_one_forced_away_is_lost_alone(target: Target) {
    let (holder, operator) = (target.locker().await, target.locker().await);
    let options = LockOptions::default().with_ttl(SHORT);
    let names: Vec<String> = (0..6).map(|i| unique(&format!("batch-{i}"))).collect();
    let mut leases = Vec::new();
    for name in &names {
        leases.push(holder.acquire(name, &options).await.unwrap());
    }
    if offers_semaphores(target) {
        let semaphore = holder.semaphore(&unique("batch-permit"), 2).unwrap();
        leases.push(semaphore.acquire(&options).await.unwrap());
    }
    let forced = leases.remove(2);
    let signal = forced.lost_signal();
    operator.force_release(forced.name()).await.unwrap();
    let next = operator.acquire(forced.name(), &held()).await.unwrap();
    let reason = tokio::time::timeout(SOON, signal.wait())
        .await
        .expect("the lease forced away was never reported lost");
    assert_eq!(reason, LossReason::TakenOver);
    assert_lost(&forced);
    stay_held_for_three_ttls(&leases.iter().collect::<Vec<_>>()).await;
    for lease in leases {
        let info = operator.inspect(lease.name()).await.unwrap();
        assert!(info.held, "{}: not held on the server", lease.name());
        lease.release().await.unwrap();
    }
    next.release().await.unwrap();
    close(vec![holder, operator]).await;
}

/// Renewals stop once the lease has been held `max_hold`: a live holder is lost at its next
/// deadline, and the lock frees.
async fn max_hold_stops_renewals(target: Target) {
    let (holder, other) = (target.locker().await, target.locker().await);
    let name = unique("max-hold");
    let lease = holder
        .acquire(
            &name,
            &LockOptions::default()
                .with_ttl(UNRENEWED)
                .with_max_hold(Some(Duration::from_millis(500))),
        )
        .await
        .unwrap();
    let reason = tokio::time::timeout(SOON, lease.lost_signal().wait())
        .await
        .expect("renewals never stopped");
    assert_eq!(reason, LossReason::Expired);
    assert_lost(&lease);
    let next = other
        .acquire(&name, &held().with_wait(Some(SOON)))
        .await
        .unwrap();
    assert!(next.token() > lease.token());
    next.release().await.unwrap();
    close(vec![holder, other]).await;
}

/// A sink that panics on every loss it is told of.
struct PanicsOnLoss;

impl MetricsSink for PanicsOnLoss {
    fn record(&self, measurement: Measurement) {
        if measurement.instrument == Instrument::Losses {
            panic!("a metrics sink that panics on a loss");
        }
    }
}

/// The lost signal fires although the metrics sink panics when told of the loss, and the
/// process's deadline watchdog lives on: a second lease's loss is signalled too.
async fn a_panicking_metrics_sink_neither_delays_nor_loses_the_lost_signal(target: Target) {
    let options = LockerOptions::default().with_metrics_sink(Arc::new(PanicsOnLoss));
    let locker = target.locker_with(options).await;
    let unrenewed = LockOptions::default()
        .with_ttl(UNRENEWED)
        .with_auto_renew(false);
    for round in 0..2 {
        let lease = locker
            .acquire(&unique(&format!("observed-{round}")), &unrenewed)
            .await
            .unwrap();
        let fired = tokio::time::timeout(SOON, lease.lost_signal().wait()).await;
        assert_eq!(
            fired.ok(),
            Some(LossReason::Expired),
            "round {round}: the lost signal never fired"
        );
    }
    locker.close().await;
}

/// An acquire returns a lease only if it is held when it returns (docs/design.md §1.2): a grant
/// whose answer is handled after the lease's client deadline (here the Locker stalls for longer
/// than the ttl, on ZooKeeper the session, between the answer and the lease, as a paused
/// process would) is given back, and the acquire takes the lock again within its wait. Before
/// this rule the stalled acquire returned a lease that was already lost.
async fn a_grant_handled_past_its_deadline_is_never_returned(target: Target) {
    use std::sync::atomic::{AtomicBool, Ordering};

    let stall = Arc::new(AtomicBool::new(true));
    let hook = {
        let stall = stall.clone();
        fencelock::options::TestHook(Arc::new(move |point: &'static str| {
            // Longer than UNRENEWED and than ZooKeeper's 2 s session, once.
            if point == "acquire_answered" && stall.swap(false, Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(2600));
            }
        }))
    };
    let mut options = LockerOptions::default();
    options.test_hook = Some(hook);
    let (locker, observer) = (target.locker_with(options).await, target.locker().await);
    let name = unique("late-grant");
    let lease = locker
        .acquire(
            &name,
            &LockOptions::default()
                .with_ttl(UNRENEWED)
                .with_wait(Some(SOON)),
        )
        .await
        .unwrap();
    assert!(!stall.load(Ordering::SeqCst), "the first grant was stalled");
    lease
        .ensure_held()
        .expect("an acquire returns a lease that is held");
    let info = observer.inspect(&name).await.unwrap();
    assert!(info.held, "the server holds it for the lease returned");
    assert_eq!(info.token, Some(lease.token()));
    lease.release().await.unwrap();
    close(vec![locker, observer]).await;
}
