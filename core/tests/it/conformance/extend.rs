//! `extend(ttl)` sets a new ttl from now (docs/design.md §1.2, §2.2): longer or shorter, the
//! lease's client deadline and the server's expiry follow it, and later renewals use the new
//! ttl (`renewals_keep_a_short_lease_alive_past_several_ttls` in loss.rs holds a lease extended
//! to a shorter ttl for several of them).

use std::time::{Duration, Instant, SystemTime};

use fencelock::{BootInstant, LockOptions};

use crate::conformance::backends::Target;
use crate::contract;
use crate::support::unique;

contract!(an_extend_moves_the_deadline_and_the_servers_expiry);

/// Without renewals, so that only the extends move the lease; the margins leave seconds for a
/// slow machine between a call and the reading that checks it.
async fn an_extend_moves_the_deadline_and_the_servers_expiry(target: Target) {
    let locker = target.locker().await;
    let name = unique("extend");
    let ttl = Duration::from_secs(10);
    let lease = locker
        .acquire(
            &name,
            &LockOptions::default().with_ttl(ttl).with_auto_renew(false),
        )
        .await
        .unwrap();
    let slack = Duration::from_secs(5);
    let check = |ttl: Duration, after: &str| {
        let name = name.clone();
        let (lease, locker) = (lease.clone(), locker.clone());
        let after = after.to_string();
        async move {
            let left = BootInstant::now().until(lease.deadline());
            assert!(
                left <= ttl && left > ttl - slack,
                "{after}: deadline in {left:?}"
            );
            let expires = lease.expires_at().expect("a TTL backend's lease expires");
            // The deadline on the wall clock: as far off, and before the server's expiry.
            let valid_until = lease.valid_until();
            let valid = valid_until
                .duration_since(SystemTime::now())
                .unwrap_or_default();
            assert!(
                valid <= ttl && valid > ttl - slack,
                "{after}: valid for {valid:?}"
            );
            assert!(
                valid_until <= expires,
                "{after}: valid until after the server's expiry"
            );
            let estimate = expires
                .duration_since(SystemTime::now())
                .unwrap_or_default();
            assert!(
                estimate <= ttl && estimate > ttl - slack,
                "{after}: expires in {estimate:?}"
            );
            // The server's own expiry, read back. Redlock reports the shortest among the
            // masters' keys, and its extend returns once a majority confirmed: the others
            // apply it a moment later (the command was sent to every master).
            let given_up = Instant::now() + Duration::from_secs(10);
            loop {
                let left = locker.inspect(&name).await.unwrap().time_left;
                let left = left.expect("a TTL backend reports the time left");
                if left <= ttl && left > ttl - slack {
                    break;
                }
                assert!(
                    Instant::now() < given_up,
                    "{after}: the server expires it in {left:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    check(ttl, "acquired").await;
    let longer = Duration::from_secs(20);
    lease.extend(Some(longer)).await.unwrap();
    check(longer, "extended to 20 s").await;
    // Shorter: the deadline moves closer, since the server's expiry moved too.
    let shorter = Duration::from_secs(8);
    lease.extend(Some(shorter)).await.unwrap();
    check(shorter, "extended to 8 s").await;
    // No ttl given: the current one, the shorter.
    lease.extend(None).await.unwrap();
    check(shorter, "extended again").await;
    assert!(lease.is_held());
    lease.release().await.unwrap();
    locker.close().await;
}
