package dev.fencelock.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.fencelock.Backends;
import dev.fencelock.ConnectOptions;
import dev.fencelock.Locker;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.Lock;
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
            Thread.sleep(200);
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
}
