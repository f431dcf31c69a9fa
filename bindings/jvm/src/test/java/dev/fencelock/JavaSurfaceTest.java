package dev.fencelock;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import kotlin.coroutines.Continuation;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The library as Java sees it: interrupts as {@code InterruptedException} (this file compiles only
 * because the blocking calls declare it), {@code Runnable} and {@code Consumer} bodies, the
 * {@code *Async} forms, and no suspend function in sight.
 */
class JavaSurfaceTest {
    private static final LockOptions TEN_SECONDS =
            LockOptions.builder().ttl(Duration.ofSeconds(10)).build();

    @ParameterizedTest
    @MethodSource("dev.fencelock.Backends#names")
    void anInterruptedWaitThrowsInterruptedExceptionAndLeavesNothingBehind(String backend) throws Exception {
        try (Locker holder = Backends.INSTANCE.connect(backend, ConnectOptions.DEFAULTS);
                Locker waiter = Backends.INSTANCE.connect(backend, ConnectOptions.DEFAULTS)) {
            String name = Backends.INSTANCE.uniqueName("java-interrupt");
            Lease held = holder.acquireBlocking(name, TEN_SECONDS);
            AtomicReference<Throwable> caught = new AtomicReference<>();
            AtomicBoolean flagAfter = new AtomicBoolean(true);
            Thread thread = new Thread(() -> {
                try {
                    waiter.acquireBlocking(name).close();
                    caught.set(new AssertionError("acquired a held lock"));
                } catch (InterruptedException e) {
                    caught.set(e);
                    flagAfter.set(Thread.currentThread().isInterrupted());
                } catch (Throwable e) {
                    caught.set(e);
                }
            });
            thread.start();
            Backends.awaitWaiting(thread, "the acquire of a held lock");
            thread.interrupt();
            thread.join(Backends.MARGIN_MS);
            assertInstanceOf(InterruptedException.class, caught.get(), "what the interrupted acquire threw");
            assertFalse(flagAfter.get(), "InterruptedException clears the flag, as Java's own calls do");

            // waitLost is a wait too.
            AtomicReference<Throwable> waitLostOutcome = new AtomicReference<>();
            Thread watcher = new Thread(() -> {
                try {
                    waitLostOutcome.set(new AssertionError("waitLost returned " + held.waitLost(null)));
                } catch (InterruptedException e) {
                    waitLostOutcome.set(e);
                }
            });
            watcher.start();
            Backends.awaitWaiting(watcher, "waitLost");
            watcher.interrupt();
            watcher.join(Backends.MARGIN_MS);
            assertInstanceOf(InterruptedException.class, waitLostOutcome.get(), "what the interrupted waitLost threw");

            // A release on an interrupted thread still releases, and the flag stays set for the
            // caller's next wait.
            Thread.currentThread().interrupt();
            try {
                held.close();
            } finally {
                assertTrue(Thread.interrupted(), "the release kept the interrupt flag");
            }
            // Nothing left behind by the interrupted waiter: a third try gets the lock at once.
            Lease next = waiter.tryAcquireBlocking(name);
            assertNotNull(next, "the interrupted waiter kept the lock or its place");
            assertTrue(next.getToken() > held.getToken());
            next.releaseBlocking();
        }
    }

    @ParameterizedTest
    @MethodSource("dev.fencelock.Backends#names")
    void runnableAndConsumerBodiesAndAsyncForms(String backend) throws Exception {
        try (Locker locker = Backends.INSTANCE.connect(backend, ConnectOptions.DEFAULTS)) {
            String name = Backends.INSTANCE.uniqueName("java-bodies");
            AtomicBoolean ran = new AtomicBoolean();
            locker.runLocked(name, () -> ran.set(true));
            assertTrue(ran.get(), "the Runnable body ran");

            AtomicLong seen = new AtomicLong();
            locker.runLocked(name, TEN_SECONDS, lease -> seen.set(lease.getToken()));
            assertTrue(seen.get() > 0, "the Consumer body saw the lease");
            // The Function form takes an expression lambda without ambiguity, its result returned.
            long token = locker.withLockBlocking(name, lease -> lease.getToken());
            assertTrue(token > seen.get());
            locker.mutex(name).runLocked(() -> ran.set(false));
            assertFalse(ran.get(), "the Lock's Runnable body ran");
            locker.mutex(name).runLocked(lease -> seen.set(lease.getToken()));
            assertTrue(seen.get() > token);

            Lease lease = locker.acquireAsync(name, TEN_SECONDS).get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS);
            CompletableFuture<Void> extended = lease.extendAsync(Duration.ofSeconds(20));
            assertNull(extended.get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS));
            LockInfo info = locker.inspectAsync(name).get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS);
            assertEquals(Long.valueOf(lease.getToken()), info.getToken());
            assertNull(lease.releaseAsync().get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS));
            assertFalse(lease.isHeld(), "released by releaseAsync");
            assertNull(locker.inspectBlocking(name).getHolder(), "nobody holds it after releaseAsync");
        }
    }

    @Test
    void fenceWritesAsync() throws Exception {
        String url = Backends.INSTANCE.url("sqlite");
        try (Locker locker = Locker.connect(url);
                Fence fence = Fence.open(url, Backends.INSTANCE.uniqueName("java-fence"))) {
            String table = "java_async_" + Math.abs(System.nanoTime() % 1_000_000);
            String lockName = Backends.INSTANCE.uniqueName("java-fence-lock");
            long earlier;
            try (Lease first = locker.acquireBlocking(lockName)) {
                earlier = first.getToken();
            }
            try (Lease lease = locker.acquireBlocking(lockName)) {
                List<Long> rows = fence.fencedExecuteAsync(
                                lease,
                                List.of(
                                        Statement.of("CREATE TABLE " + table + " (v INTEGER)"),
                                        Statement.of("INSERT INTO " + table + " (v) VALUES (?)", 7)))
                        .get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS);
                assertEquals(1L, rows.get(1), "the insert's rows");
                assertNull(fence.checkAsync(lease).get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS));
                assertEquals(
                        Long.valueOf(lease.getToken()),
                        fence.highestAsync().get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS));
                try {
                    fence.checkAsync(earlier).get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS);
                    fail("an older token passed the fence");
                } catch (java.util.concurrent.ExecutionException e) {
                    assertInstanceOf(StaleTokenException.class, e.getCause());
                }
            }
        }
    }

    @Test
    void aFenceReadsItsDatabaseReadOnlyWithoutASecondSqlite() throws Exception {
        // The lock file itself, read through a fence on it: no sqlite-jdbc in this process.
        String url = Backends.INSTANCE.url("sqlite");
        try (Locker locker = Locker.connect(url);
                Fence fence = Fence.open(url, Backends.INSTANCE.uniqueName("java-reads"))) {
            String table = "java_query_" + Math.abs(System.nanoTime() % 1_000_000);
            String name = Backends.INSTANCE.uniqueName("java-query");
            try (Lease lease = locker.acquireBlocking(name)) {
                fence.fencedExecuteBlocking(
                        lease,
                        List.of(
                                Statement.of("CREATE TABLE " + table + " (k TEXT, v)"),
                                Statement.of(
                                        "INSERT INTO " + table + " VALUES (?, ?), (?, ?), (?, ?), (?, ?), (?, ?)",
                                        "i",
                                        7L,
                                        "f",
                                        1.5,
                                        "s",
                                        "text",
                                        "b",
                                        new byte[] {0, -1},
                                        "n",
                                        null)));
            }
            List<List<Object>> rows = fence.queryBlocking("SELECT k, v FROM " + table + " ORDER BY k");
            assertEquals(5, rows.size());
            assertArrayEquals(new byte[] {0, -1}, (byte[]) rows.get(0).get(1));
            assertEquals(Arrays.asList("f", 1.5), rows.get(1));
            assertEquals(Arrays.asList("i", 7L), rows.get(2));
            assertEquals(Arrays.asList("n", null), rows.get(3));
            assertEquals(Arrays.asList("s", "text"), rows.get(4));
            assertEquals(
                    List.of(List.of(7L)),
                    fence.queryAsync("SELECT v FROM " + table + " WHERE k = ?", "i")
                            .get(Backends.MARGIN_MS, TimeUnit.MILLISECONDS));
            List<List<Object>> held =
                    fence.queryBlocking("SELECT name FROM fencelock_locks WHERE name = CAST(? AS BLOB)", name);
            assertEquals(1, held.size(), "the lock table, read through the fence");
            // A write is refused and lands nowhere.
            assertThrows(LockInvalidArgumentException.class, () -> fence.queryBlocking("DELETE FROM " + table));
            assertEquals(5, fence.queryBlocking("SELECT k FROM " + table).size());
            assertThrows(LockBackendException.class, () -> fence.queryBlocking("SELECT * FROM nowhere"));
        }
    }

    @Test
    void suspendFunctionsAreHiddenFromJava() {
        List<String> visible = new ArrayList<>();
        for (Class<?> type : List.of(
                Locker.class,
                Locker.Companion.class,
                Lock.class,
                Lease.class,
                MultiLease.class,
                Leadership.class,
                Fence.class,
                Fence.Companion.class)) {
            for (Method method : type.getDeclaredMethods()) {
                Class<?>[] params = method.getParameterTypes();
                boolean suspending = params.length > 0 && params[params.length - 1] == Continuation.class;
                if (suspending && !method.isSynthetic() && !Modifier.isPrivate(method.getModifiers())) {
                    visible.add(type.getSimpleName() + "." + method.getName());
                }
            }
        }
        assertTrue(visible.isEmpty(), "suspend functions Java can see: " + visible);
        // And the check looks where they are: Locker has suspend functions, all synthetic.
        long hidden = java.util.Arrays.stream(Locker.class.getDeclaredMethods())
                .filter(m -> m.getParameterCount() > 0
                        && m.getParameterTypes()[m.getParameterCount() - 1] == Continuation.class)
                .count();
        assertTrue(hidden > 5, "Locker's suspend functions found by reflection: " + hidden);
    }
}
