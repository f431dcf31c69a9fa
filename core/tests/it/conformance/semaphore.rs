//! Semaphores (issue 28): at most N permit leases of a name at once, each with a token larger
//! than every permit granted before it; participants agree on N while the semaphore is in use
//! and may change it once it is idle; a permit lease expires, is lost and is force-released like
//! a mutex lease; inspect shows every holder; a permit lease cannot be fenced; re-entry follows
//! the mutex's rules; a name is one kind at a time; and a backend that does not offer
//! semaphores (Redlock) refuses them with INVALID_ARGUMENT.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencelock::{ErrorCode, Lease, LockKind, LockMode, LockerOptions, LossReason, MAX_PERMITS};

use crate::conformance::backends::{Target, offers_semaphores};
use crate::conformance::exclusion::close;
use crate::conformance::fence::SqliteFence;
use crate::conformance::kinds::{
    HOLDER_TEXT, OTHER, OUTER, SOON, assert_deadlock, assert_kind_conflict, assert_shown_free,
    assert_shows_leases, at_once, inspect_until, reentrant, refused, tokens_of, tokens_shown,
    waiting,
};
use crate::conformance::release::held;
use crate::contract;
use crate::support::unique;

// The scenarios that need semaphores: not offered where the backend has none
// ([`crate::conformance::backends::not_offered`]); the scenario after them checks the refusal there.
crate::contract_needing!(
    NEED_SEMAPHORES:
    n_holders_at_once_and_the_next_waits_for_a_release,
    never_more_than_n_permits_under_contention,
    permits_must_agree_while_held_and_may_change_once_idle,
    permits_outside_1_to_10000_and_bad_names_are_refused,
    an_unrenewed_permit_is_lost_at_its_deadline_and_a_waiter_gets_in,
    a_forced_release_frees_every_permit_holder,
    inspect_shows_the_semaphore_its_permits_and_every_lease,
    a_permit_lease_cannot_be_fenced,
    a_scope_re_enters_its_permit_only_when_reentrant,
    a_name_in_use_as_a_mutex_is_not_a_semaphore_and_vice_versa,
    a_waiter_given_up_on_leaves_no_permit_behind,
);
contract!(semaphores_are_refused_where_the_backend_does_not_offer_them);

/// The ttl of a lease that must be lost quickly: nothing renews it, so it cannot starve.
const UNRENEWED: Duration = Duration::from_millis(1000);

/// A ttl whose renewals (every third of it) come quickly after a forced release.
const RENEWED_QUICKLY: Duration = Duration::from_millis(4500);

async fn n_holders_at_once_and_the_next_waits_for_a_release(target: Target) {
    const N: u32 = 3;
    let (first, second) = (target.locker().await, target.locker().await);
    // The waiter's fallback poll is a minute away: only its backend's wake-up can hand it the
    // freed permit within seconds (every backend that offers semaphores wakes their waiters).
    let slow_poll = LockerOptions::default().with_poll_interval(Duration::from_secs(60));
    let (waiter, probe) = target.probed_locker_with(slow_poll).await;
    let name = unique("sem-admits");
    let locks = [
        first.semaphore(&name, N).unwrap(),
        second.semaphore(&name, N).unwrap(),
    ];
    assert_eq!(locks[0].name(), name);
    assert_eq!(locks[0].mode(), LockMode::Permit { permits: N });
    // Granted one after another (two to one Locker: each acquire is its own permit), so each
    // token is larger than the one before it.
    let mut leases: Vec<Lease> = Vec::new();
    for i in 0..N as usize {
        let lease = locks[i % 2].try_acquire(&held()).await.unwrap();
        let lease = lease.unwrap_or_else(|| panic!("permit {} of {N} was refused", i + 1));
        assert_eq!(lease.mode(), LockMode::Permit { permits: N });
        if let Some(before) = leases.last() {
            assert!(lease.token() > before.token(), "{leases:?} then {lease:?}");
        }
        leases.push(lease);
    }
    for lock in &locks {
        let extra = lock.try_acquire(&held()).await.unwrap();
        assert!(extra.is_none(), "a permit beyond {N}: {extra:?}");
    }
    let waiting = {
        let lock = waiter.semaphore(&name, N).unwrap();
        tokio::spawn(async move { lock.acquire(&waiting()).await })
    };
    probe.until_waiting(&first, &name).await;
    let info = inspect_until(&first, &name, "the waiter", |i| !i.waiters.is_empty()).await;
    assert_eq!(info.leases.len(), N as usize, "not {N} holders: {info:?}");

    let freed = leases.remove(1);
    let released = Instant::now();
    freed.release().await.unwrap();
    let next = waiting.await.unwrap();
    let next = next.unwrap_or_else(|e| panic!("the waiter never got the freed permit: {e}"));
    // A wake-up, not the poll; a wide margin for a busy machine.
    let took = released.elapsed();
    assert!(took < Duration::from_secs(5), "woken only after {took:?}");
    assert_eq!(next.mode(), LockMode::Permit { permits: N });
    let earlier = leases.iter().chain([&freed]).map(Lease::token).max();
    assert!(
        next.token() > earlier.unwrap_or(0),
        "{next:?} after {leases:?}"
    );
    leases.push(next);
    let expected = tokens_of(&leases.iter().collect::<Vec<_>>());
    inspect_until(&first, &name, "the waiter's permit", |i| {
        tokens_shown(i) == expected
    })
    .await;
    for lease in leases {
        lease.release().await.unwrap();
    }
    close(vec![first, second, waiter]).await;
}

/// One permit's acquisition: when it was asked for, when it was granted, and its token.
struct Grant {
    asked: Instant,
    granted: Instant,
    token: u64,
}

async fn never_more_than_n_permits_under_contention(target: Target) {
    const N: usize = 2;
    const LOCKERS: usize = 2;
    const TASKS_PER_LOCKER: usize = 3;
    const ROUNDS: usize = 4;
    let name = unique("sem-contention");
    let inside = Arc::new(AtomicUsize::new(0));
    let grants = Arc::new(Mutex::new(Vec::new()));
    let options = held().with_wait(Some(Duration::from_secs(60)));
    let (mut tasks, mut lockers) = (Vec::new(), Vec::new());
    for _ in 0..LOCKERS {
        let locker = target.locker().await;
        for _ in 0..TASKS_PER_LOCKER {
            let lock = locker.semaphore(&name, N as u32).unwrap();
            let (options, inside, grants) = (options.clone(), inside.clone(), grants.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let asked = Instant::now();
                    let lease = lock.acquire(&options).await.unwrap();
                    let granted = Instant::now();
                    let before = inside.fetch_add(1, Ordering::SeqCst);
                    assert!(before < N, "{} holders of {N} permits", before + 1);
                    let token = lease.token();
                    grants.lock().unwrap().push(Grant {
                        asked,
                        granted,
                        token,
                    });
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    lease.release().await.unwrap();
                }
            }));
        }
        lockers.push(locker);
    }
    for task in tasks {
        task.await.unwrap();
    }
    let grants = std::mem::take(&mut *grants.lock().unwrap());
    assert_eq!(grants.len(), LOCKERS * TASKS_PER_LOCKER * ROUNDS);
    let mut tokens: Vec<u64> = grants.iter().map(|g| g.token).collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), grants.len(), "two permits shared a token");
    // Tokens follow the grant order: a permit asked for after another was granted has the
    // larger token (permits granted concurrently are not ordered by anything we can see).
    for earlier in &grants {
        for later in grants.iter().filter(|g| g.asked > earlier.granted) {
            assert!(
                later.token > earlier.token,
                "token {} was asked for after token {} was granted",
                later.token,
                earlier.token
            );
        }
    }
    close(lockers).await;
}

async fn permits_must_agree_while_held_and_may_change_once_idle(target: Target) {
    let (locker, other) = (target.locker().await, target.locker().await);
    let name = unique("sem-agree");
    let two = locker.semaphore(&name, 2).unwrap();
    let first = two.acquire(&waiting()).await.unwrap();
    // Making the handle asks nothing of the backend; using it with another count is refused,
    // at once even by an acquire that would wait.
    let three = other.semaphore(&name, 3).unwrap();
    let tried = refused(
        three.try_acquire(&held()).await,
        "3 permits while 2 are in use",
    );
    let waited = refused(three.acquire(&waiting()).await, "3 permits, waiting");
    for err in [tried, waited] {
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
        assert!(err.message().contains(&name), "{err}");
    }
    assert!(first.is_held());
    // The agreed count still works from the other Locker.
    let second = other
        .semaphore(&name, 2)
        .unwrap()
        .try_acquire(&held())
        .await;
    let second = second.unwrap().expect("the second of 2 permits");
    first.release().await.unwrap();
    second.release().await.unwrap();

    // Idle now: the new count replaces the old one.
    let mut leases = Vec::new();
    for _ in 0..3 {
        let lease = three.try_acquire(&held()).await.unwrap();
        leases.push(lease.expect("3 permits once the semaphore of 2 is idle"));
    }
    assert_eq!(other.inspect(&name).await.unwrap().permits, Some(3));
    let old = refused(
        two.try_acquire(&held()).await,
        "2 permits while 3 are in use",
    );
    assert_eq!(old.code(), ErrorCode::InvalidArgument, "{old}");
    for lease in leases {
        lease.release().await.unwrap();
    }
    close(vec![locker, other]).await;
}

async fn permits_outside_1_to_10000_and_bad_names_are_refused(target: Target) {
    let locker = target.locker().await;
    let name = unique("sem-range");
    for permits in [0, MAX_PERMITS + 1, u32::MAX] {
        let err = refused(locker.semaphore(&name, permits), "a count out of range");
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{permits}: {err}");
    }
    for bad in [String::new(), "a\0b".to_string(), "x".repeat(256)] {
        let err = refused(locker.semaphore(&bad, 2), "a bad name");
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{bad:?}: {err}");
    }
    // Nothing was stored: the name is free for any count in range, both bounds included.
    for permits in [1, MAX_PERMITS] {
        let lock = locker.semaphore(&name, permits).unwrap();
        let lease = lock.try_acquire(&held()).await.unwrap();
        let lease = lease.unwrap_or_else(|| panic!("a semaphore of {permits} was refused"));
        assert_eq!(lease.mode(), LockMode::Permit { permits });
        lease.release().await.unwrap();
    }
    locker.close().await;
}

/// Without renewal a permit lease ends at its client deadline (on ZooKeeper one session
/// timeout), as a mutex lease does: lost, and the waiter gets the permit; the other permit's
/// holder is untouched.
async fn an_unrenewed_permit_is_lost_at_its_deadline_and_a_waiter_gets_in(target: Target) {
    let (holder, other) = (target.locker().await, target.locker().await);
    let name = unique("sem-unrenewed");
    let lock = holder.semaphore(&name, 2).unwrap();
    let unrenewed = held().with_ttl(UNRENEWED).with_auto_renew(false);
    let short = lock.acquire(&unrenewed).await.unwrap();
    let kept = lock.acquire(&held()).await.unwrap();
    let deadline = short.deadline();
    let next = other.semaphore(&name, 2).unwrap().acquire(&waiting()).await;
    let next = next.unwrap_or_else(|e| panic!("the unrenewed permit never freed: {e}"));
    // The client deadline comes before the server lets anybody else in.
    assert!(deadline.has_passed());
    assert!(short.is_lost() && !short.is_held());
    let reason = tokio::time::timeout(SOON, short.lost_signal().wait()).await;
    assert_eq!(reason.ok(), Some(LossReason::Expired));
    assert_eq!(short.release().await.unwrap_err().code(), ErrorCode::Lost);
    assert!(kept.is_held());
    assert!(next.token() > kept.token() && kept.token() > short.token());
    let expected = tokens_of(&[&kept, &next]);
    inspect_until(&other, &name, "the live permits", |i| {
        tokens_shown(i) == expected
    })
    .await;
    kept.release().await.unwrap();
    next.release().await.unwrap();
    close(vec![holder, other]).await;
}

/// A forced release frees every permit at once, and each old holder is lost at its next
/// renewal (on ZooKeeper, from the watch on its node), told the lock is no longer its own.
async fn a_forced_release_frees_every_permit_holder(target: Target) {
    let (holder, operator) = (target.locker().await, target.locker().await);
    let name = unique("sem-forced");
    let lock = holder.semaphore(&name, 2).unwrap();
    let renewed = held().with_ttl(RENEWED_QUICKLY);
    let old = [
        lock.acquire(&renewed).await.unwrap(),
        lock.acquire(&renewed).await.unwrap(),
    ];
    let signals = old.each_ref().map(Lease::lost_signal);
    operator.force_release(&name).await.unwrap();
    let theirs = operator.semaphore(&name, 2).unwrap();
    let mut new = Vec::new();
    for _ in 0..2 {
        let lease = theirs.try_acquire(&held()).await.unwrap();
        new.push(lease.expect("every permit is free after the forced release"));
    }
    for signal in signals {
        let reason = tokio::time::timeout(SOON, signal.wait()).await;
        assert_eq!(reason.ok(), Some(LossReason::TakenOver));
    }
    for lease in &old {
        assert!(lease.is_lost());
        assert_eq!(lease.release().await.unwrap_err().code(), ErrorCode::Lost);
        // The fencing counter did not move back.
        assert!(new.iter().all(|n| n.token() > lease.token()));
    }
    // The old holders' releases touched nothing of the new holders'.
    let expected = tokens_of(&[&new[0], &new[1]]);
    inspect_until(&operator, &name, "the new permits", |i| {
        tokens_shown(i) == expected
    })
    .await;
    for lease in new {
        lease.release().await.unwrap();
    }
    let free = operator.force_release(&name).await.unwrap_err();
    assert_eq!(free.code(), ErrorCode::NotHeld, "{free}");
    close(vec![holder, operator]).await;
}

async fn inspect_shows_the_semaphore_its_permits_and_every_lease(target: Target) {
    let (locker, other) = (target.locker().await, target.locker().await);
    let name = unique("sem-inspect");
    let ttl = Duration::from_secs(10);
    let options = held().with_ttl(ttl).with_holder(HOLDER_TEXT);
    let first = locker.semaphore(&name, 3).unwrap().acquire(&options).await;
    let second = other.semaphore(&name, 3).unwrap().acquire(&options).await;
    let (first, second) = (first.unwrap(), second.unwrap());
    let mode = LockMode::Permit { permits: 3 };
    let info = assert_shows_leases(&locker, &name, &[&first, &second], mode, ttl).await;
    assert_eq!(info.name, name);
    assert_eq!(info.kind, LockKind::Semaphore, "{info:?}");
    assert_eq!(info.permits, Some(3), "{info:?}");
    if let Some(token) = info.token {
        assert!(token >= second.token(), "{info:?}");
    }
    assert!(info.waiters.is_empty(), "{info:?}");
    first.release().await.unwrap();
    assert_shows_leases(&locker, &name, &[&second], mode, ttl).await;
    second.release().await.unwrap();
    assert_shown_free(&locker, &name).await;
    close(vec![locker, other]).await;
}

/// Several permit holders run at once, so "the newest token wins" would refuse the others'
/// writes: a fence refuses a permit lease outright, before anything is written.
async fn a_permit_lease_cannot_be_fenced(target: Target) {
    let locker = target.locker().await;
    let store = SqliteFence::open("permits").await;
    let (fence, bump) = (&store.fence, SqliteFence::bump());
    let name = unique("sem-fenced");
    let lease = locker
        .semaphore(&name, 2)
        .unwrap()
        .acquire(&waiting())
        .await;
    let lease = lease.unwrap();
    let refusals = [
        fence.fenced_execute(&lease, &bump).await.map(|_| ()),
        fence
            .fenced_execute(lease.fence_token(), &bump)
            .await
            .map(|_| ()),
        fence.check(&lease).await,
        fence.check(lease.fence_token()).await,
    ];
    for result in refusals {
        let err = refused(result, "a fenced write with a permit lease");
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    }
    assert_eq!(store.count().await, 0);
    assert_eq!(
        fence.highest().await.unwrap(),
        None,
        "a permit token was recorded"
    );
    assert!(lease.is_held());
    lease.release().await.unwrap();
    store.close().await;
    locker.close().await;
}

/// A permit re-enters in its scope with `reentrant` (the same lease and token, one permit);
/// without it a nested acquire is DEADLOCK even while another permit is free, since the scope
/// would otherwise hold two permits it cannot tell apart.
async fn a_scope_re_enters_its_permit_only_when_reentrant(target: Target) {
    let (locker, rival) = (target.locker().await, target.locker().await);
    let name = unique("sem-reentry");
    let (lock, rival_lock) = (
        locker.semaphore(&name, 2).unwrap(),
        rival.semaphore(&name, 2).unwrap(),
    );
    let outer = lock.acquire_in(OUTER, &reentrant()).await.unwrap();
    let inner = lock.acquire_in(OUTER, &at_once()).await.unwrap();
    assert_eq!(
        inner.token(),
        outer.token(),
        "a nested lease carries the outer token"
    );
    // Both are one permit: the second one is still free.
    let second = rival_lock.try_acquire(&held()).await.unwrap();
    let second = second.expect("the nested acquire took a second permit");
    assert!(rival_lock.try_acquire(&held()).await.unwrap().is_none());
    second.release().await.unwrap();

    let plain = waiting();
    let nested = lock.acquire_in(OUTER, &plain).await;
    assert_deadlock(nested, &name, "a nested permit without reentrant");
    let tried = lock.try_acquire_in(OUTER, &plain).await;
    assert_deadlock(tried, &name, "a nested try without reentrant");
    // Another scope of the same Locker is another holder: it takes the free permit.
    let other_scope = lock.try_acquire_in(OTHER, &reentrant()).await.unwrap();
    let other_scope = other_scope.expect("another scope takes the free permit");
    assert!(other_scope.token() > outer.token());

    inner.release().await.unwrap();
    assert!(outer.is_held());
    assert!(rival_lock.try_acquire(&held()).await.unwrap().is_none());
    outer.release().await.unwrap();
    let next = rival_lock.try_acquire(&held()).await.unwrap();
    let next = next.expect("the scope's permit is free after its last lease");
    next.release().await.unwrap();
    other_scope.release().await.unwrap();
    close(vec![locker, rival]).await;
}

async fn a_name_in_use_as_a_mutex_is_not_a_semaphore_and_vice_versa(target: Target) {
    let (locker, other) = (target.locker().await, target.locker().await);
    let name = unique("sem-kind");
    let (semaphore, mutex) = (LockKind::Semaphore, LockKind::Mutex);
    let held_mutex = locker.acquire(&name, &waiting()).await.unwrap();
    let lock = other.semaphore(&name, 2).unwrap();
    assert_kind_conflict(lock.try_acquire(&held()).await, &name, semaphore, mutex);
    assert_kind_conflict(lock.acquire(&waiting()).await, &name, semaphore, mutex);
    let own = locker
        .semaphore(&name, 2)
        .unwrap()
        .try_acquire(&held())
        .await;
    assert_kind_conflict(own, &name, semaphore, mutex);
    held_mutex.release().await.unwrap();

    let permit = lock.acquire(&waiting()).await.unwrap();
    assert_kind_conflict(
        locker.acquire(&name, &waiting()).await,
        &name,
        mutex,
        semaphore,
    );
    assert_kind_conflict(
        locker.try_acquire(&name, &held()).await,
        &name,
        mutex,
        semaphore,
    );
    let handle = locker.mutex(&name).unwrap();
    assert_eq!(handle.mode(), LockMode::Exclusive);
    assert_kind_conflict(handle.try_acquire(&held()).await, &name, mutex, semaphore);
    assert!(permit.is_held());
    permit.release().await.unwrap();

    // Idle, the name may be a mutex again.
    let again = handle.acquire(&waiting()).await.unwrap();
    assert_eq!(again.mode(), LockMode::Exclusive);
    again.release().await.unwrap();
    close(vec![locker, other]).await;
}

async fn semaphores_are_refused_where_the_backend_does_not_offer_them(target: Target) {
    let locker = target.locker().await;
    let name = unique("sem-offered");
    let made = locker.semaphore(&name, 2);
    if offers_semaphores(target) {
        assert_eq!(made.unwrap().mode(), LockMode::Permit { permits: 2 });
    } else {
        // Refused before any I/O, whatever the count.
        for result in [made, locker.semaphore(&name, 1)] {
            let err = refused(result, "a semaphore where none is offered");
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
            assert!(err.message().contains("semaphore"), "{err}");
        }
    }
    // The mutex is offered everywhere.
    let mutex = locker.mutex(&name).unwrap();
    let lease = mutex.acquire(&waiting()).await.unwrap();
    assert_eq!(lease.mode(), LockMode::Exclusive);
    lease.release().await.unwrap();
    locker.close().await;
}

/// A waiter given up on (its acquire dropped) leaves no permit behind. On ZooKeeper a waiter
/// that holds Curator's internal mutex may be creating its lease node when it is dropped; left
/// behind, that node would take a permit for as long as the session lives. Dropped as soon as
/// an observer sees it waiting, twenty times over; then the permit must still be free.
async fn a_waiter_given_up_on_leaves_no_permit_behind(target: Target) {
    let observer = target.locker().await;
    let waiter = target.locker().await;
    let name = unique("sem-given-up");
    let holder = observer.semaphore(&name, 1).unwrap();
    let lock = waiter.semaphore(&name, 1).unwrap();
    for _ in 0..20 {
        let held = holder.acquire(&waiting()).await.unwrap();
        let attempt = {
            let lock = lock.clone();
            tokio::spawn(async move { lock.acquire(&waiting()).await })
        };
        inspect_until(&observer, &name, "the waiter", |i| !i.waiters.is_empty()).await;
        attempt.abort();
        let _ = attempt.await;
        held.release().await.unwrap();
    }
    let last = holder
        .acquire(&waiting())
        .await
        .unwrap_or_else(|e| panic!("a given-up waiter kept the only permit: {e}"));
    last.release().await.unwrap();
    close(vec![observer, waiter]).await;
}
