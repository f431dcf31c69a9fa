package dev.fencelock.shedlock;

import dev.fencelock.Lease;
import dev.fencelock.LockDeadlockException;
import dev.fencelock.LockInvalidArgumentException;
import dev.fencelock.LockLostException;
import dev.fencelock.LockNotHeldException;
import dev.fencelock.LockOptions;
import dev.fencelock.Locker;
import java.time.Duration;
import java.time.Instant;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import net.javacrumbs.shedlock.core.ClockProvider;
import net.javacrumbs.shedlock.core.ExtensibleLockProvider;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.SimpleLock;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A ShedLock {@code LockProvider} on any fencelock backend: {@code @SchedulerLock} jobs run on one
 * instance at a time, with the lock held as a fencelock lease (so its fencing token is there for
 * a job that writes through a {@code Fence}: {@link #currentLease()}).
 *
 * <pre>{@code
 * @Bean
 * LockProvider lockProvider(Locker locker) {
 *     return new FencelockLockProvider(locker);
 * }
 * }</pre>
 *
 * <ul>
 *   <li>{@code lockAtMostFor} is the lease's ttl, with renewal off: a holder that dies frees the
 *       lock when the ttl runs out on the server, and one that runs too long has it released at
 *       {@code lockAtMostFor} by this provider, as ShedLock expects. The lease lasts at least a
 *       second (fencelock refuses ttls below 100 ms, and backends with a clock-drift allowance
 *       below a few hundred): a shorter {@code lockAtMostFor} is kept by that release all the
 *       same, so only a holder that dies keeps such a lock for up to a second.
 *   <li>On ZooKeeper a lease lives by its session (10 s by default), not by a ttl: there it renews
 *       (the session's heartbeat) until {@code unlock()} or this provider's release at
 *       {@code lockAtMostFor}. A holder whose process dies frees the lock when its session ends
 *       (its nodes are ephemeral), not at {@code lockAtMostFor}.
 *   <li>Closing the {@code Locker} releases every lock it holds, a job's included: close it after
 *       the scheduler has stopped its jobs.
 *   <li>{@code lockAtLeastFor}: {@code unlock()} before it has passed keeps the lease until it has
 *       (its ttl set to what is left, so a holder that dies meanwhile frees it then too).
 *   <li>{@code extend} (ShedLock's {@code LockExtender}) sets a new ttl from now; the old
 *       {@code SimpleLock} is spent afterwards, as ShedLock requires.
 * </ul>
 */
public final class FencelockLockProvider implements ExtensibleLockProvider {
    private static final Logger LOG = LoggerFactory.getLogger(FencelockLockProvider.class);

    /**
     * The shortest lease this provider takes: fencelock's own minimum is 100 ms, but a backend
     * with a clock-drift allowance (max_skew) refuses ttls that the allowance would eat half of.
     * A second fits every backend's defaults; shorter lockAtMostFor values are kept by the
     * provider's own release.
     */
    static final Duration SHORTEST_LEASE = Duration.ofSeconds(1);

    /** Releases the leases whose lockAtMostFor or lockAtLeastFor ended: one daemon thread for all. */
    private static final ScheduledExecutorService TIMERS = Executors.newSingleThreadScheduledExecutor(task -> {
        Thread thread = new Thread(task, "fencelock-shedlock-timer");
        thread.setDaemon(true);
        return thread;
    });

    private static final ThreadLocal<Lease> CURRENT = new ThreadLocal<>();

    private final Locker locker;

    /**
     * Whether [locker]'s leases live by a session rather than a ttl (ZooKeeper): taken without
     * renewal, such a lease would end one session timeout after it was taken, whatever
     * lockAtMostFor says, and another instance would run the job while this one still does.
     */
    private final boolean sessionLeases;

    /** Takes ShedLock's locks through [locker], which the application keeps open (and closes). */
    public FencelockLockProvider(Locker locker) {
        this.locker = Objects.requireNonNull(locker, "locker");
        this.sessionLeases = locker.getUrl().startsWith("zk://");
    }

    /**
     * The lease of the ShedLock lock this thread took last and still holds (inside a
     * {@code @SchedulerLock} method: the job's own), for its fencing token; empty otherwise.
     */
    public static Optional<Lease> currentLease() {
        Lease lease = CURRENT.get();
        return lease != null && lease.isHeld() ? Optional.of(lease) : Optional.empty();
    }

    @Override
    public Optional<SimpleLock> lock(LockConfiguration configuration) {
        Instant now = ClockProvider.now();
        Duration atMost = Duration.between(now, configuration.getLockAtMostUntil());
        if (atMost.isNegative() || atMost.isZero()) {
            return Optional.empty();
        }
        LockOptions options = LockOptions.builder()
                .ttl(longest(atMost, SHORTEST_LEASE))
                .autoRenew(sessionLeases)
                .build();
        Lease lease;
        try {
            lease = locker.tryAcquireBlocking(configuration.getName(), options);
        } catch (LockDeadlockException e) {
            // This thread holds it already (a job still running, or kept for lockAtLeastFor):
            // to ShedLock that is a lock somebody holds.
            return Optional.empty();
        } catch (InterruptedException e) {
            // ShedLock's interface cannot throw it: keep the flag, and take nothing.
            Thread.currentThread().interrupt();
            return Optional.empty();
        }
        if (lease == null) {
            return Optional.empty();
        }
        CURRENT.set(lease);
        return Optional.of(new FencelockSimpleLock(
                lease, configuration.getLockAtMostUntil(), configuration.getLockAtLeastUntil()));
    }

    @Override
    public String toString() {
        return "FencelockLockProvider(" + locker.getUrl() + ")";
    }

    private static Duration longest(Duration a, Duration b) {
        return a.compareTo(b) >= 0 ? a : b;
    }

    /** Releases [lease] unless it is gone already (released, or lost when its ttl ran out). */
    private static void releaseQuietly(Lease lease, String why) {
        try {
            lease.releaseBlocking();
        } catch (LockNotHeldException | LockLostException e) {
            LOG.debug("ShedLock lock {} was already free at {}: {}", lease.getName(), why, e.getMessage());
        } catch (RuntimeException e) {
            LOG.warn("releasing ShedLock lock {} at {} failed", lease.getName(), why, e);
        }
    }

    /** Ends [lease]'s time as the calling thread's current lease (its job is over). */
    private static void leaveCurrent(Lease lease) {
        if (CURRENT.get() == lease) {
            CURRENT.remove();
        }
    }

    /** One ShedLock lock: valid until unlocked or extended (which hands over to a new one). */
    private static final class FencelockSimpleLock implements SimpleLock {
        private final Lease lease;
        private final Instant lockAtMostUntil;
        private final Instant lockAtLeastUntil;
        private final AtomicBoolean valid = new AtomicBoolean(true);
        private final ScheduledFuture<?> expiry;

        FencelockSimpleLock(Lease lease, Instant lockAtMostUntil, Instant lockAtLeastUntil) {
            this.lease = lease;
            this.lockAtMostUntil = lockAtMostUntil;
            this.lockAtLeastUntil = lockAtLeastUntil;
            long delay = Duration.between(ClockProvider.now(), lockAtMostUntil).toNanos();
            this.expiry = TIMERS.schedule(() -> releaseQuietly(lease, "lockAtMostFor"), delay, TimeUnit.NANOSECONDS);
        }

        @Override
        public void unlock() {
            spend("unlocked");
            leaveCurrent(lease);
            expiry.cancel(false);
            Duration atLeast = Duration.between(ClockProvider.now(), lockAtLeastUntil);
            if (atLeast.isNegative() || atLeast.isZero()) {
                releaseQuietly(lease, "unlock");
                return;
            }
            // Held on until lockAtLeastFor has passed, then released; the ttl shrinks to match so
            // that a process that dies meanwhile does not keep it longer.
            try {
                lease.extendBlocking(longest(atLeast, SHORTEST_LEASE));
            } catch (LockLostException | LockNotHeldException e) {
                LOG.debug("ShedLock lock {} was lost before lockAtLeastFor ended", lease.getName());
                return;
            } catch (LockInvalidArgumentException e) {
                // A ttl this backend refuses (max_skew): the lease keeps its longer one.
                LOG.debug("ShedLock lock {} keeps its ttl for lockAtLeastFor: {}", lease.getName(), e.getMessage());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            TIMERS.schedule(() -> releaseQuietly(lease, "lockAtLeastFor"), atLeast.toNanos(), TimeUnit.NANOSECONDS);
        }

        @Override
        public Optional<SimpleLock> extend(Duration lockAtMostFor, Duration lockAtLeastFor) {
            Instant now = ClockProvider.now();
            spend("extended");
            if (!now.isBefore(lockAtMostUntil) || !lease.isHeld()) {
                leaveCurrent(lease);
                expiry.cancel(false);
                releaseQuietly(lease, "extend after lockAtMostFor");
                return Optional.empty();
            }
            expiry.cancel(false);
            try {
                lease.extendBlocking(longest(lockAtMostFor, SHORTEST_LEASE));
            } catch (LockLostException | LockNotHeldException e) {
                return Optional.empty();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                releaseQuietly(lease, "an interrupted extend");
                return Optional.empty();
            }
            return Optional.of(new FencelockSimpleLock(lease, now.plus(lockAtMostFor), now.plus(lockAtLeastFor)));
        }

        /** Marks this lock used up by [what], or throws as ShedLock requires if it already was. */
        private void spend(String what) {
            if (!valid.compareAndSet(true, false)) {
                throw new IllegalStateException("this ShedLock lock of " + lease.getName()
                        + " was already unlocked or extended; it cannot be " + what + " again");
            }
        }

        @Override
        public String toString() {
            return "FencelockSimpleLock(" + lease.getName() + ", token=" + lease.getToken() + ")";
        }
    }
}
