package dev.fencelock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * The multi-name lock from Java: {@code lockManyBlocking} and {@code lockManyAsync} with and
 * without options, try-with-resources, the getters of {@code MultiLease}, and a raw list holding
 * something other than names refused with {@code LockInvalidArgumentException}.
 */
class MultiLockJavaTest {
    private static final LockOptions TEN_SECONDS =
            LockOptions.builder().ttl(Duration.ofSeconds(10)).build();

    @Test
    void javaSignatures() throws Exception {
        try (Locker locker = Backends.INSTANCE.connect("sqlite", ConnectOptions.DEFAULTS);
                Locker other = Backends.INSTANCE.connect("sqlite", ConnectOptions.DEFAULTS)) {
            String base = Backends.INSTANCE.uniqueName("java-many");
            String a = base + "-a";
            String b = base + "-b";
            long tokenOfA;
            try (MultiLease both = locker.lockManyBlocking(List.of(b, a), TEN_SECONDS)) {
                List<String> names = both.getNames();
                assertEquals(List.of(a, b), names);
                Map<String, Long> tokens = both.getTokens();
                assertEquals(List.of(a, b), new ArrayList<>(tokens.keySet()), "tokens in the canonical order");
                Lease partOfA = both.part(a);
                tokenOfA = partOfA.getToken();
                assertEquals(tokens.get(a), Long.valueOf(tokenOfA));
                assertNull(both.part("not-a-part"));
                assertEquals(2, both.getParts().size());
                assertTrue(both.isHeld());
                assertFalse(both.isLost());
                assertNull(both.getLostReason());
                both.ensureHeld();
                Instant validUntil = both.getValidUntil();
                assertTrue(validUntil.isAfter(Instant.now()), "valid until " + validUntil);
                Instant expiresAt = both.getExpiresAt();
                assertTrue(expiresAt == null || !validUntil.isAfter(expiresAt));
                both.extendBlocking();
                both.extendBlocking(Duration.ofSeconds(8));
                both.onLost((reason, message) -> {});
                CompletableFuture<LossReason> lost = both.lostFuture();
                assertFalse(both.waitLost(Duration.ZERO));
                assertFalse(lost.isDone());
                assertNull(other.tryAcquireBlocking(a), "a second holder of a part");
            }
            // Left the block: released, one part after the other.
            try (MultiLease again = other.lockManyAsync(List.of(a, b)).get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS)) {
                assertTrue(again.getTokens().get(a) > tokenOfA);
                again.releaseBlocking();
                assertThrows(LockNotHeldException.class, again::releaseBlocking);
            }
            try (MultiLease one = locker.lockManyBlocking(List.of(a))) {
                assertEquals(List.of(a), one.getNames());
            }
            CompletableFuture<MultiLease> withOptions = locker.lockManyAsync(List.of(a, b), TEN_SECONDS);
            withOptions.get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS).close();

            // A raw list holding something else, or a null, is refused rather than cast.
            @SuppressWarnings({"rawtypes", "unchecked"})
            List<String> numbers = (List) Arrays.asList(a, 42);
            FencelockException e =
                    assertThrows(LockInvalidArgumentException.class, () -> locker.lockManyBlocking(numbers));
            assertEquals(ErrorCode.INVALID_ARGUMENT, e.getCode());
            assertThrows(LockInvalidArgumentException.class, () -> locker.lockManyBlocking(Arrays.asList(a, null)));
            ExecutionException failed = assertThrows(
                    ExecutionException.class,
                    () -> locker.lockManyAsync(numbers).get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS));
            assertTrue(failed.getCause() instanceof LockInvalidArgumentException, String.valueOf(failed.getCause()));
            assertThrows(LockInvalidArgumentException.class, () -> locker.lockManyBlocking(List.of()));
            assertThrows(LockInvalidArgumentException.class, () -> locker.lockManyBlocking(List.of(a, a)));
        }
    }
}
