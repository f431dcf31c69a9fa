package dev.fencelock.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.fencelock.Backends;
import dev.fencelock.ConnectOptions;
import dev.fencelock.Lease;
import dev.fencelock.Locker;
import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.Lock;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The Spring Integration LockRegistry on every backend: one holder fleet-wide (two registries on
 * two Lockers stand for two instances), re-entrant per thread, the java.util.concurrent.locks.Lock
 * contract for waits, interrupts and unlock by a thread that does not hold it.
 */
class FencelockLockRegistryTest {
    private static Locker connect(String backend) {
        return Backends.INSTANCE.connect(backend, ConnectOptions.DEFAULTS);
    }

    /** Whether a thread other than this one can take [lock] now (and lets it go again). */
    private static boolean freeForAnotherThread(Lock lock) throws Exception {
        AtomicReference<Boolean> got = new AtomicReference<>();
        Thread other = new Thread(() -> {
            boolean taken = lock.tryLock();
            if (taken) {
                lock.unlock();
            }
            got.set(taken);
        });
        other.start();
        other.join(Backends.MARGIN_MS);
        return got.get();
    }

    @ParameterizedTest
    @MethodSource("dev.fencelock.Backends#names")
    void oneHolderFleetWideReentrantPerThread(String backend) throws Exception {
        try (Locker locker = connect(backend);
                Locker other = connect(backend)) {
            FencelockLockRegistry registry = new FencelockLockRegistry(locker, Duration.ofSeconds(10));
            FencelockLockRegistry otherInstance = new FencelockLockRegistry(other, Duration.ofSeconds(10));
            String key = Backends.INSTANCE.uniqueName("registry");
            FencelockLockRegistry.FencelockLock lock = registry.obtain(key);
            assertSame(lock, registry.obtain(key), "obtain gives one Lock per key");

            lock.lock();
            long token = lock.currentLease().orElseThrow().getToken();
            assertTrue(token > 0);
            assertFalse(otherInstance.obtain(key).tryLock(), "another instance took a held lock");
            assertFalse(
                    otherInstance.obtain(key).tryLock(200, TimeUnit.MILLISECONDS), "another instance, waiting 200 ms");
            assertFalse(freeForAnotherThread(lock), "another thread of this instance took a held lock");
            lock.lock(); // re-entered by the holding thread
            lock.unlock();
            assertFalse(freeForAnotherThread(lock), "free after one of two unlocks");
            lock.unlock();
            assertTrue(freeForAnotherThread(lock), "free after both unlocks");
            assertThrows(IllegalMonitorStateException.class, lock::unlock, "an unlock without lock");

            // executeLocked, Spring's own default method, with its wait.
            String result = otherInstance.executeLocked(key, Duration.ofSeconds(5), () -> {
                assertFalse(lock.tryLock(), "taken while executeLocked holds it");
                return "ran";
            });
            assertEquals("ran", result);
            assertTrue(lock.tryLock(), "free after executeLocked");
            lock.unlock();

            // An interrupted wait throws InterruptedException and leaves nothing behind.
            Lock held = otherInstance.obtain(key);
            held.lock();
            AtomicReference<Throwable> outcome = new AtomicReference<>();
            Thread waiter = new Thread(() -> {
                try {
                    lock.lockInterruptibly();
                    outcome.set(new AssertionError("took a held lock"));
                } catch (Throwable e) {
                    outcome.set(e);
                }
            });
            waiter.start();
            Backends.awaitWaiting(waiter, "lockInterruptibly of a held lock");
            waiter.interrupt();
            waiter.join(Backends.MARGIN_MS);
            assertInstanceOf(InterruptedException.class, outcome.get());
            held.unlock();
            assertTrue(lock.tryLock(), "the interrupted waiter left nothing behind");
            lock.unlock();

            assertThrows(IllegalArgumentException.class, () -> registry.obtain(42));
            assertThrows(UnsupportedOperationException.class, lock::newCondition);
        }
    }

    /**
     * Keys from request data ("order-" + id) are unbounded: the registry keeps at most its cache
     * capacity of idle locks, and never drops one a thread holds (a held key keeps its object,
     * whose unlock must still find its lease).
     */
    @Test
    void manyKeysStayWithinTheCacheBoundAndHeldLocksStay() throws Exception {
        try (Locker locker = connect("sqlite")) {
            FencelockLockRegistry registry = new FencelockLockRegistry(locker, Duration.ofSeconds(10));
            String mine = Backends.INSTANCE.uniqueName("registry-held-here");
            FencelockLockRegistry.FencelockLock heldHere = registry.obtain(mine);
            heldHere.lock();

            // Another thread of this process holds a second key through the whole churn.
            String theirs = Backends.INSTANCE.uniqueName("registry-held-there");
            FencelockLockRegistry.FencelockLock heldThere = registry.obtain(theirs);
            CountDownLatch taken = new CountDownLatch(1);
            CountDownLatch churned = new CountDownLatch(1);
            AtomicReference<Throwable> otherOutcome = new AtomicReference<>();
            Thread other = new Thread(() -> {
                try {
                    heldThere.lock();
                    taken.countDown();
                    churned.await();
                    heldThere.unlock();
                } catch (Throwable e) {
                    otherOutcome.set(e);
                }
            });
            other.start();
            assertTrue(taken.await(Backends.MARGIN_MS, TimeUnit.MILLISECONDS), "the other thread took its lock");

            int maxSize = 0;
            for (int i = 0; i < 1_000_000; i++) {
                registry.obtain("order-" + i);
                if (i % 1_000 == 0) {
                    maxSize = Math.max(maxSize, registry.size());
                }
            }
            int bound = FencelockLockRegistry.DEFAULT_CACHE_CAPACITY + 2; // the two held locks
            assertTrue(maxSize <= bound, "the registry grew to " + maxSize + " locks, above " + bound);
            assertTrue(registry.size() <= bound, "the registry kept " + registry.size() + " locks");

            assertSame(heldHere, registry.obtain(mine), "a lock held here was dropped from the registry");
            assertSame(heldThere, registry.obtain(theirs), "a lock held by another thread was dropped");
            assertTrue(heldHere.currentLease().orElseThrow().isHeld(), "still held after the churn");
            churned.countDown();
            other.join(Backends.MARGIN_MS);
            assertEquals(null, otherOutcome.get(), "the other thread's lock and unlock");
            heldHere.unlock();
            assertTrue(heldHere.currentLease().isEmpty(), "released");
            assertTrue(freeForAnotherThread(heldHere), "free after its unlock");
            assertTrue(freeForAnotherThread(heldThere), "free after the other thread's unlock");
        }
    }

    /**
     * Lock's usual "wait forever", tryLock(Long.MAX_VALUE, unit), is a wait beyond the core's
     * longest finite wait (a year): it waits forever instead of being refused.
     */
    @Test
    void tryLockWithTheLongestWaitWaitsForever() throws Exception {
        try (Locker locker = connect("sqlite")) {
            FencelockLockRegistry registry = new FencelockLockRegistry(locker, Duration.ofSeconds(10));
            FencelockLockRegistry.FencelockLock lock =
                    registry.obtain(Backends.INSTANCE.uniqueName("registry-forever"));
            for (TimeUnit unit : new TimeUnit[] {TimeUnit.NANOSECONDS, TimeUnit.MILLISECONDS, TimeUnit.DAYS}) {
                assertTrue(lock.tryLock(Long.MAX_VALUE, unit), "tryLock(Long.MAX_VALUE, " + unit + ")");
                lock.unlock();
            }
            assertTrue(lock.tryLock(367, TimeUnit.DAYS), "a wait just above the core's longest");
            lock.unlock();
            assertTrue(lock.tryLock(-1, TimeUnit.SECONDS), "a negative wait tries once");
            lock.unlock();

            // Held by another thread, a "forever" waiter gets the lock once it is released.
            Lock holder = registry.obtain(lock.getName());
            CountDownLatch taken = new CountDownLatch(1);
            CountDownLatch release = new CountDownLatch(1);
            Thread other = new Thread(() -> {
                holder.lock();
                taken.countDown();
                try {
                    release.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                } finally {
                    holder.unlock();
                }
            });
            other.start();
            assertTrue(taken.await(Backends.MARGIN_MS, TimeUnit.MILLISECONDS), "the other thread took the lock");
            assertFalse(lock.tryLock(), "held by the other thread");
            release.countDown();
            assertTrue(lock.tryLock(Long.MAX_VALUE, TimeUnit.NANOSECONDS), "waited for the release");
            lock.unlock();
            other.join(Backends.MARGIN_MS);
        }
    }

    /**
     * The cache's bound and expireUnusedOlderThan evict idle locks only, least recently obtained
     * first; a lock kept from before its entry went still works, through any object of its name.
     */
    @Test
    void capacityAndExpiryEvictOnlyIdleLocks() throws Exception {
        try (Locker locker = connect("sqlite")) {
            FencelockLockRegistry registry = new FencelockLockRegistry(locker, Duration.ofSeconds(10));
            String prefix = Backends.INSTANCE.uniqueName("registry-idle");
            FencelockLockRegistry.FencelockLock held = registry.obtain(prefix + "-held");
            held.lock();
            FencelockLockRegistry.FencelockLock kept = registry.obtain(prefix + "-kept");
            for (int i = 0; i < 10; i++) {
                registry.obtain(prefix + "-" + i);
            }
            assertEquals(12, registry.size());

            registry.setCacheCapacity(3);
            assertEquals(4, registry.size(), "the 3 most recently obtained idle locks, and the held one");
            FencelockLockRegistry.FencelockLock recent = registry.obtain(prefix + "-9");
            registry.expireUnusedOlderThan(Backends.MARGIN_MS);
            assertEquals(4, registry.size(), "nothing idle for that long");
            assertSame(recent, registry.obtain(prefix + "-9"), "kept within the bound");
            registry.expireUnusedOlderThan(0);
            assertEquals(1, registry.size(), "only the held lock stays");
            assertSame(held, registry.obtain(prefix + "-held"));

            // An evicted lock, kept by the application, is cached again once it is taken.
            assertTrue(kept.tryLock(), "a lock whose entry was evicted");
            assertSame(kept, registry.obtain(prefix + "-kept"));
            kept.unlock();

            // Evicted, then another object of the name cached: either one unlocks what the other locked.
            registry.expireUnusedOlderThan(0);
            FencelockLockRegistry.FencelockLock fresh = registry.obtain(prefix + "-kept");
            assertNotSame(kept, fresh);
            kept.lock();
            assertSame(fresh, registry.obtain(prefix + "-kept"), "the cached object stays while in use");
            assertTrue(fresh.currentLease().isPresent(), "the lease shows through the cached object");
            assertFalse(freeForAnotherThread(fresh), "held");
            fresh.unlock();
            assertTrue(kept.currentLease().isEmpty(), "released through the other object");
            assertTrue(freeForAnotherThread(kept), "free after the unlock");

            held.unlock();
            registry.expireUnusedOlderThan(0);
            assertEquals(0, registry.size());
            assertThrows(IllegalArgumentException.class, () -> registry.setCacheCapacity(0));
        }
    }

    /** renewLock extends the calling thread's lease now; other threads and free locks are refused. */
    @Test
    void renewLockExtendsTheCallingThreadsLease() throws Exception {
        try (Locker locker = connect("sqlite")) {
            FencelockLockRegistry registry = new FencelockLockRegistry(locker, Duration.ofSeconds(10));
            String key = Backends.INSTANCE.uniqueName("registry-renew");
            assertThrows(IllegalMonitorStateException.class, () -> registry.renewLock(key), "a lock not held");
            FencelockLockRegistry.FencelockLock lock = registry.obtain(key);
            lock.lock();
            Lease lease = lock.currentLease().orElseThrow();
            Instant before = lease.getValidUntil();
            registry.renewLock(key, Duration.ofMinutes(5));
            assertTrue(
                    lease.getValidUntil().isAfter(before.plusSeconds(60)),
                    "renewed for 5 minutes: " + before + " -> " + lease.getValidUntil());
            registry.renewLock(key);

            AtomicReference<Throwable> fromOther = new AtomicReference<>();
            Thread other = new Thread(() -> {
                try {
                    registry.renewLock(key);
                } catch (Throwable e) {
                    fromOther.set(e);
                }
            });
            other.start();
            other.join(Backends.MARGIN_MS);
            assertInstanceOf(IllegalMonitorStateException.class, fromOther.get(), "renewed by a thread not holding it");

            lock.unlock();
            assertThrows(IllegalMonitorStateException.class, () -> registry.renewLock(key), "after the unlock");
            assertThrows(IllegalArgumentException.class, () -> registry.renewLock(42));
        }
    }
}
