package dev.fencelock.shedlock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.fencelock.Backends;
import dev.fencelock.ConnectOptions;
import dev.fencelock.Lease;
import dev.fencelock.Locker;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import net.javacrumbs.shedlock.core.ClockProvider;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.SimpleLock;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The ShedLock LockProvider contract, on every backend: what ShedLock's own
 * AbstractExtensibleLockProviderIntegrationTest checks (that class is not published to Maven
 * Central, so it cannot be a dependency here), with margins for a slow CI machine. "Free" and
 * "held" are read through a second Locker, as another instance of the application would see them.
 */
class FencelockLockProviderTest {
    /** Long enough for every test, within the test Redlock's max_ttl of 30 s. */
    private static final Duration LONG = Duration.ofSeconds(20);

    private static LockConfiguration config(String name, Duration atMost, Duration atLeast) {
        // ShedLock's clock (whole milliseconds), as ShedLock makes its configurations.
        return new LockConfiguration(ClockProvider.now(), name, atMost, atLeast);
    }

    private static Locker connect(String backend) {
        return Backends.INSTANCE.connect(backend, ConnectOptions.DEFAULTS);
    }

    /** Whether another instance can take [name] now (and lets it go again at once). */
    private static boolean freeFor(Locker other, String name) throws InterruptedException {
        Lease probe = other.tryAcquireBlocking(name);
        if (probe == null) {
            return false;
        }
        probe.releaseBlocking();
        return true;
    }

    /** Polls until another instance can take [name]; how long after [since] that was. */
    private static Duration waitFree(Locker other, String name, Instant since) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(Backends.MARGIN_MS);
        while (System.nanoTime() < deadline) {
            if (freeFor(other, name)) {
                return Duration.between(since, Instant.now());
            }
            Thread.sleep(10);
        }
        return fail(name + " stayed held for " + Backends.MARGIN_MS + " ms");
    }

    @ParameterizedTest
    @MethodSource("dev.fencelock.Backends#names")
    void locksOnceUnlocksAndLocksAgain(String backend) throws Exception {
        try (Locker locker = connect(backend);
                Locker other = connect(backend)) {
            FencelockLockProvider provider = new FencelockLockProvider(locker);
            FencelockLockProvider otherInstance = new FencelockLockProvider(other);
            String name = Backends.INSTANCE.uniqueName("shedlock");
            SimpleLock lock = provider.lock(config(name, LONG, Duration.ZERO)).orElseThrow();
            long token = FencelockLockProvider.currentLease().orElseThrow().getToken();
            assertTrue(token > 0, "the job's lease, with its fencing token");
            assertTrue(provider.lock(config(name, LONG, Duration.ZERO)).isEmpty(), "a second lock, same thread");
            assertTrue(otherInstance.lock(config(name, LONG, Duration.ZERO)).isEmpty(), "another instance");
            assertTrue(
                    provider.lock(config(name + "-2", LONG, Duration.ZERO))
                            .map(l -> {
                                l.unlock();
                                return true;
                            })
                            .orElse(false),
                    "an independent name is free");
            lock.unlock();
            assertTrue(FencelockLockProvider.currentLease().isEmpty(), "no current lease after unlock");
            assertTrue(freeFor(other, name), "free after unlock");
            assertThrows(IllegalStateException.class, lock::unlock, "a second unlock");
            for (int i = 0; i < 5; i++) {
                SimpleLock again =
                        provider.lock(config(name, LONG, Duration.ZERO)).orElseThrow();
                assertTrue(otherInstance.lock(config(name, LONG, Duration.ZERO)).isEmpty());
                again.unlock();
            }
        }
    }

    @ParameterizedTest
    @MethodSource("dev.fencelock.Backends#names")
    void lockAtMostForFreesALockWhoseHolderNeverUnlocks(String backend) throws Exception {
        try (Locker locker = connect(backend);
                Locker other = connect(backend)) {
            FencelockLockProvider provider = new FencelockLockProvider(locker);
            // Above fencelock's shortest ttl, and below it (50 ms, as ShedLock's own test uses).
            for (Duration atMost : List.of(Duration.ofMillis(700), Duration.ofMillis(50))) {
                String name = Backends.INSTANCE.uniqueName("shedlock-most");
                Instant start = Instant.now();
                Optional<SimpleLock> lock = provider.lock(config(name, atMost, Duration.ZERO));
                assertTrue(lock.isPresent());
                if (atMost.toMillis() > 300) {
                    assertFalse(freeFor(other, name), "held before lockAtMostFor");
                }
                Duration freed = waitFree(other, name, start);
                assertTrue(freed.compareTo(atMost.minusMillis(20)) >= 0, "freed after " + freed + ", before " + atMost);
                // Too late to extend: the lock is gone.
                assertTrue(lock.get().extend(LONG, Duration.ZERO).isEmpty(), "extended past lockAtMostFor");
            }
        }
    }

    /**
     * A job that outlives the shortest lease (a second) and, on ZooKeeper, the session (a short
     * one here, 2 s) still holds the lock until it unlocks: a second instance cannot take it.
     * Before, the ZooKeeper lease was taken without renewal and ended one session timeout after
     * it was taken, while the job ran on.
     */
    @ParameterizedTest
    @MethodSource("dev.fencelock.Backends#names")
    void aLongJobHoldsTheLockPastTheShortestLeaseAndTheSessionUntilItUnlocks(String backend) throws Exception {
        boolean zookeeper = backend.equals("zookeeper");
        String url = Backends.INSTANCE.url(backend);
        String shortSession = url + (url.contains("?") ? "&" : "?") + "session_timeout_ms=2000";
        try (Locker locker = zookeeper ? Locker.connect(shortSession) : connect(backend);
                Locker other = connect(backend)) {
            FencelockLockProvider provider = new FencelockLockProvider(locker);
            String name = Backends.INSTANCE.uniqueName("shedlock-long-job");
            SimpleLock lock = provider.lock(config(name, LONG, Duration.ZERO)).orElseThrow();
            // The job runs past the session (ZooKeeper) or the shortest lease (the others).
            Thread.sleep(zookeeper ? 3_000 : 1_500);
            assertFalse(freeFor(other, name), "another instance took the lock while the job ran");
            assertTrue(FencelockLockProvider.currentLease().isPresent(), "the job's lease is still held");
            lock.unlock();
            waitFree(other, name, Instant.now());
        }
    }

    @ParameterizedTest
    @MethodSource("dev.fencelock.Backends#names")
    void lockAtLeastForKeepsTheLockAfterUnlock(String backend) throws Exception {
        try (Locker locker = connect(backend);
                Locker other = connect(backend)) {
            FencelockLockProvider provider = new FencelockLockProvider(locker);
            String name = Backends.INSTANCE.uniqueName("shedlock-least");
            Duration atLeast = Duration.ofSeconds(1);
            Instant start = Instant.now();
            provider.lock(config(name, LONG, atLeast)).orElseThrow().unlock();
            assertTrue(FencelockLockProvider.currentLease().isEmpty(), "the job's lease after its unlock");
            assertFalse(freeFor(other, name), "free right after unlock, before lockAtLeastFor");
            assertTrue(provider.lock(config(name, LONG, Duration.ZERO)).isEmpty(), "taken again before lockAtLeastFor");
            Duration freed = waitFree(other, name, start);
            assertTrue(freed.compareTo(atLeast.minusMillis(20)) >= 0, "freed after " + freed + ", before " + atLeast);
        }
    }

    @ParameterizedTest
    @MethodSource("dev.fencelock.Backends#names")
    void extendHandsOverToANewLock(String backend) throws Exception {
        try (Locker locker = connect(backend);
                Locker other = connect(backend)) {
            FencelockLockProvider provider = new FencelockLockProvider(locker);
            String name = Backends.INSTANCE.uniqueName("shedlock-extend");
            Duration first = Duration.ofMillis(600);
            Instant start = Instant.now();
            SimpleLock lock = provider.lock(config(name, first, Duration.ZERO)).orElseThrow();
            SimpleLock extended =
                    lock.extend(Duration.ofSeconds(10), Duration.ZERO).orElseThrow();
            assertThrows(IllegalStateException.class, lock::unlock, "unlock of the lock that was extended");
            assertThrows(
                    IllegalStateException.class,
                    () -> lock.extend(Duration.ofSeconds(10), Duration.ZERO),
                    "a second extend of the same lock");
            // Past the first lockAtMostFor, still held.
            while (Duration.between(start, Instant.now()).compareTo(first.plusMillis(300)) < 0) {
                Thread.sleep(20);
            }
            assertFalse(freeFor(other, name), "free after the first lockAtMostFor, though extended");
            extended.unlock();
            assertTrue(freeFor(other, name), "free after unlocking the extended lock");

            // An extend that keeps it for lockAtLeastFor.
            SimpleLock kept = provider.lock(config(name, LONG, Duration.ZERO)).orElseThrow();
            kept.extend(Duration.ofSeconds(10), Duration.ofSeconds(5))
                    .orElseThrow()
                    .unlock();
            assertFalse(freeFor(other, name), "free after unlock within the extended lockAtLeastFor");
            locker.forceReleaseBlocking(name);
        }
    }

    @ParameterizedTest
    @MethodSource("dev.fencelock.Backends#names")
    void jobsOnSeveralThreadsAndInstancesNeverOverlap(String backend) throws Exception {
        try (Locker locker = connect(backend);
                Locker other = connect(backend)) {
            List<FencelockLockProvider> providers =
                    List.of(new FencelockLockProvider(locker), new FencelockLockProvider(other));
            String name = Backends.INSTANCE.uniqueName("shedlock-fuzz");
            int threads = 4;
            int rounds = 15;
            AtomicInteger counter = new AtomicInteger();
            ExecutorService pool = Executors.newFixedThreadPool(threads);
            try {
                List<Future<?>> done = new ArrayList<>();
                for (int t = 0; t < threads; t++) {
                    FencelockLockProvider provider = providers.get(t % 2);
                    done.add(pool.submit(() -> {
                        int mine = 0;
                        while (mine < rounds) {
                            Optional<SimpleLock> lock = provider.lock(config(name, LONG, Duration.ZERO));
                            if (lock.isEmpty()) {
                                Thread.sleep(1);
                                continue;
                            }
                            // A read, a pause and a write that two holders at once would get wrong.
                            int seen = counter.get();
                            Thread.sleep(1);
                            counter.set(seen + 1);
                            lock.get().unlock();
                            mine++;
                        }
                        return null;
                    }));
                }
                for (Future<?> f : done) {
                    f.get(3 * Backends.MARGIN_MS, TimeUnit.MILLISECONDS);
                }
            } finally {
                pool.shutdownNow();
            }
            assertEquals(threads * rounds, counter.get(), "increments lost to overlapping holders");
        }
    }
}
