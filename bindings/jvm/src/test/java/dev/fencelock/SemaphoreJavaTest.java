package dev.fencelock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Semaphores and read-write locks from Java, in the blocking form: try-with-resources leases, a
 * wait that runs out, {@code withLockBlocking}, and the fields of {@code inspectBlocking}, on every
 * backend that offers them.
 */
class SemaphoreJavaTest {
    private static final LockOptions TEN_SECONDS =
            LockOptions.builder().ttl(Duration.ofSeconds(10)).build();

    @ParameterizedTest
    @MethodSource("dev.fencelock.Backends#withSemaphores")
    void blockingFormFromJava(String backend) throws Exception {
        try (Locker locker = Backends.INSTANCE.connect(backend, ConnectOptions.DEFAULTS);
                Locker other = Backends.INSTANCE.connect(backend, ConnectOptions.DEFAULTS);
                Locker third = Backends.INSTANCE.connect(backend, ConnectOptions.DEFAULTS)) {
            String name = Backends.INSTANCE.uniqueName("java-sem");
            Lock reports = locker.semaphore(name, 2);
            assertEquals(Integer.valueOf(2), reports.getPermits());
            // One permit through each Locker: this thread asking one Locker twice would be DEADLOCK.
            try (Lease first = reports.acquireBlocking(TEN_SECONDS);
                    Lease second = other.semaphore(name, 2).acquireBlocking(TEN_SECONDS)) {
                assertEquals(LockMode.PERMIT, first.getMode());
                assertTrue(first.getValidUntil().isAfter(Instant.now()), "the client deadline is ahead");
                assertTrue(second.getToken() > first.getToken());
                Lock full = third.semaphore(name, 2);
                assertNull(full.tryAcquireBlocking(), "a third permit of 2");
                LockOptions shortWait =
                        LockOptions.builder().wait(Duration.ofMillis(200)).build();
                assertThrows(LockTimeoutException.class, () -> full.acquireBlocking(shortWait));
                LockInfo info = third.inspectBlocking(name);
                assertEquals(LockKind.SEMAPHORE, info.getKind());
                assertEquals(Integer.valueOf(2), info.getPermits());
                assertEquals(2, info.getLeases().size());
            }

            String catalog = Backends.INSTANCE.uniqueName("java-rw");
            try (Lease reading = locker.readLock(catalog).acquireBlocking()) {
                LockMode shared = other.readLock(catalog).withLockBlocking(lease -> lease.getMode());
                assertEquals(LockMode.READ, shared);
                assertNull(other.writeLock(catalog).tryAcquireBlocking(), "a writer beside a reader");
                assertEquals(LockMode.READ, reading.getMode());
            }
            try (Lease writing =
                    other.writeLock(catalog).acquireAsync(TEN_SECONDS).get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS)) {
                assertEquals(LockMode.WRITE, writing.getMode());
                assertNull(locker.readLock(catalog).tryAcquireBlocking(), "a reader beside the writer");
            }
        }
    }
}
