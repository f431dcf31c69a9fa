package dev.fencelock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.function.Executable;

/**
 * Bad inputs from Java, each giving the exception the README documents, never a crash or a
 * silent success. Runs on SQLite (a temporary file) plus one unreachable and one refused server.
 */
class BadInputsTest {
    private static final Duration TEN_SECONDS = Duration.ofSeconds(10);

    private record Case(String what, Class<? extends FencelockException> expected, ErrorCode code, Executable body) {}

    @TestFactory
    List<DynamicTest> badInputs() throws Exception {
        Path dir = Files.createTempDirectory("fencelock-jvm-bad-inputs");
        String url = "sqlite://" + dir.resolve("locks.db").toAbsolutePath();
        Locker locker = Locker.connect(url);
        Fence fence = Fence.open(url, "bad-inputs");
        List<Case> cases = new ArrayList<>();
        Class<LockInvalidArgumentException> invalid = LockInvalidArgumentException.class;
        ErrorCode bad = ErrorCode.INVALID_ARGUMENT;

        cases.add(new Case("empty name", invalid, bad, () -> locker.acquireBlocking("")));
        cases.add(new Case("name with NUL", invalid, bad, () -> locker.acquireBlocking("a\0b")));
        cases.add(new Case("name of 256 bytes", invalid, bad, () -> locker.acquireBlocking("n".repeat(256))));
        cases.add(new Case(
                "ttl of zero",
                invalid,
                bad,
                () -> locker.acquireBlocking(
                        "x", LockOptions.builder().ttl(Duration.ZERO).build())));
        cases.add(new Case(
                "ttl of 50 ms",
                invalid,
                bad,
                () -> locker.tryAcquireBlocking(
                        "x", LockOptions.builder().ttl(Duration.ofMillis(50)).build())));
        cases.add(new Case(
                "ttl of 8 days",
                invalid,
                bad,
                () -> locker.acquireBlocking(
                        "x", LockOptions.builder().ttl(Duration.ofDays(8)).build())));
        cases.add(new Case(
                "negative ttl", invalid, bad, () -> LockOptions.builder().ttl(Duration.ofSeconds(-1))));
        cases.add(new Case("null ttl", invalid, bad, () -> LockOptions.builder().ttl(null)));
        cases.add(new Case(
                "negative wait", invalid, bad, () -> LockOptions.builder().wait(Duration.ofMillis(-5))));
        cases.add(new Case(
                "wait of two years",
                invalid,
                bad,
                () -> locker.acquireBlocking(
                        "x", LockOptions.builder().wait(Duration.ofDays(730)).build())));
        cases.add(new Case(
                "maxHold of zero",
                invalid,
                bad,
                () -> locker.acquireBlocking(
                        "x", LockOptions.builder().maxHold(Duration.ZERO).build())));
        cases.add(new Case(
                "holder text over 1024 bytes",
                invalid,
                bad,
                () -> locker.acquireBlocking(
                        "x", LockOptions.builder().holder("h".repeat(2000)).build())));
        cases.add(new Case("unknown URL scheme", invalid, bad, () -> Locker.connect("ftp://127.0.0.1/locks")));
        cases.add(new Case("not a URL", invalid, bad, () -> Locker.connect("not a url")));
        cases.add(new Case("port out of range", invalid, bad, () -> Locker.connect("redis://127.0.0.1:99999")));
        cases.add(new Case(
                "poll interval of zero",
                invalid,
                bad,
                () -> Locker.connect(
                        url,
                        ConnectOptions.builder().pollInterval(Duration.ZERO).build())));
        cases.add(new Case(
                "operation timeout of 1 ms",
                invalid,
                bad,
                () -> Locker.connect(
                        url,
                        ConnectOptions.builder()
                                .operationTimeout(Duration.ofMillis(1))
                                .build())));
        cases.add(new Case("negative token at a fence", invalid, bad, () -> fence.checkBlocking(-1L)));
        cases.add(new Case(
                "unsupported statement parameter",
                invalid,
                bad,
                () -> fence.fencedExecuteBlocking(1L, List.of(Statement.of("SELECT ?", new Object())))));
        cases.add(
                new Case("list with a prefix of 256 bytes", invalid, bad, () -> locker.listBlocking("p".repeat(256))));
        cases.add(new Case(
                "list with a prefix of 128 two-byte characters",
                invalid,
                bad,
                () -> locker.listBlocking("\u00e9".repeat(128))));
        cases.add(new Case("list with a NUL in the prefix", invalid, bad, () -> locker.listBlocking("jobs/\0")));
        cases.add(new Case("force release of an empty name", invalid, bad, () -> locker.forceReleaseBlocking("")));
        cases.add(
                new Case("force release of a name with NUL", invalid, bad, () -> locker.forceReleaseBlocking("a\0b")));
        cases.add(new Case("inspect a name of 256 bytes", invalid, bad, () -> locker.inspectBlocking("n".repeat(256))));
        cases.add(new Case("onEvent with no kinds", invalid, bad, () -> locker.onEvent(event -> {}, Set.of())));
        cases.add(new Case(
                "force release of a free lock",
                LockNotHeldException.class,
                ErrorCode.NOT_HELD,
                () -> locker.forceReleaseBlocking("never-taken")));
        cases.add(new Case("force release of a released lock", LockNotHeldException.class, ErrorCode.NOT_HELD, () -> {
            locker.acquireBlocking("force-twice").releaseBlocking();
            locker.forceReleaseBlocking("force-twice");
        }));
        cases.add(new Case("list on a closed Locker", LockClosedException.class, ErrorCode.CLOSED, () -> {
            Locker closed = Locker.connect(url);
            closed.close();
            closed.listBlocking();
        }));
        cases.add(new Case("force release on a closed Locker", LockClosedException.class, ErrorCode.CLOSED, () -> {
            Locker closed = Locker.connect(url);
            closed.close();
            closed.forceReleaseBlocking("x");
        }));
        cases.add(new Case("onEvent on a closed Locker", LockClosedException.class, ErrorCode.CLOSED, () -> {
            Locker closed = Locker.connect(url);
            closed.close();
            closed.onEvent(event -> {});
        }));
        cases.add(new Case("extend to a ttl of 10 ms", invalid, bad, () -> {
            try (Lease lease = locker.acquireBlocking("extend-short")) {
                lease.extendBlocking(Duration.ofMillis(10));
            }
        }));
        cases.add(new Case("release twice", LockNotHeldException.class, ErrorCode.NOT_HELD, () -> {
            Lease lease = locker.acquireBlocking("twice");
            lease.releaseBlocking();
            lease.releaseBlocking();
        }));
        cases.add(new Case(
                "the same thread acquires again without reentrant",
                LockDeadlockException.class,
                ErrorCode.DEADLOCK,
                () -> {
                    try (Lease lease = locker.acquireBlocking("again")) {
                        locker.acquireBlocking("again");
                    }
                }));
        cases.add(new Case("wait of zero while held", LockTimeoutException.class, ErrorCode.TIMEOUT, () -> {
            try (Locker other = Locker.connect(url);
                    Lease lease = locker.acquireBlocking("busy")) {
                other.acquireBlocking(
                        "busy", LockOptions.builder().wait(Duration.ZERO).build());
            }
        }));
        cases.add(new Case("acquire on a closed Locker", LockClosedException.class, ErrorCode.CLOSED, () -> {
            Locker closed = Locker.connect(url);
            closed.close();
            closed.acquireBlocking("after-close");
        }));
        cases.add(new Case("an older token at a fence", StaleTokenException.class, ErrorCode.STALE_TOKEN, () -> {
            try (Fence f = Fence.open(url, "stale")) {
                long older;
                try (Lease lease = locker.acquireBlocking("stale")) {
                    older = lease.getToken();
                }
                try (Lease lease = locker.acquireBlocking("stale")) {
                    f.checkBlocking(lease);
                    f.fencedExecuteBlocking(lease, List.of(Statement.of("SELECT 1")));
                }
                f.fencedExecuteBlocking(older, List.of(Statement.of("SELECT 1")));
            }
        }));
        cases.add(new Case("campaign with an empty name", invalid, bad, () -> locker.campaignBlocking("")));
        cases.add(new Case(
                "tryAcquire with a wait",
                invalid,
                bad,
                () -> locker.tryAcquireBlocking(
                        "x", LockOptions.builder().wait(TEN_SECONDS).build())));
        cases.add(new Case("leader of a name with NUL", invalid, bad, () -> locker.leaderBlocking("a\0b")));
        cases.add(new Case(
                "campaign with a wait of zero while another leads",
                LockTimeoutException.class,
                ErrorCode.TIMEOUT,
                () -> {
                    try (Locker other = Locker.connect(url);
                            Leadership leading = locker.campaignBlocking("elect-busy")) {
                        other.campaignBlocking(
                                "elect-busy",
                                CampaignOptions.builder().wait(Duration.ZERO).build());
                    }
                }));
        cases.add(new Case("resign twice", LockNotHeldException.class, ErrorCode.NOT_HELD, () -> {
            Leadership leadership = locker.campaignBlocking("elect-twice");
            leadership.resignBlocking();
            leadership.resignBlocking();
        }));
        cases.add(new Case(
                "runAsLeader whose leadership was taken away",
                LockLostException.class,
                ErrorCode.LOST,
                () -> locker.runAsLeader(
                        "elect-lost",
                        CampaignOptions.builder().ttl(Duration.ofSeconds(1)).build(),
                        leadership -> {
                            // A Function body cannot throw InterruptedException: it is handled here.
                            try {
                                locker.forceReleaseBlocking("elect-lost");
                                return leadership.waitLost(TEN_SECONDS);
                            } catch (InterruptedException e) {
                                throw new IllegalStateException(e);
                            }
                        })));
        cases.add(new Case("a semaphore of 0 permits", invalid, bad, () -> locker.semaphore("sem", 0)));
        cases.add(new Case("a semaphore of -3 permits", invalid, bad, () -> locker.semaphore("sem", -3)));
        cases.add(new Case("a semaphore of 10,001 permits", invalid, bad, () -> locker.semaphore("sem", 10_001)));
        cases.add(new Case("a semaphore with an empty name", invalid, bad, () -> locker.semaphore("", 2)));
        cases.add(new Case("a read lock with NUL in its name", invalid, bad, () -> locker.readLock("a\0b")));
        cases.add(new Case("a write lock of 256 bytes", invalid, bad, () -> locker.writeLock("n".repeat(256))));
        cases.add(new Case("a semaphore whose count differs from its holders'", invalid, bad, () -> {
            try (Lease held = locker.semaphore("sem-count", 2).acquireBlocking()) {
                locker.semaphore("sem-count", 3)
                        .acquireAsync(LockOptions.builder().wait(TEN_SECONDS).build())
                        .join();
            } catch (java.util.concurrent.CompletionException e) {
                throw e.getCause();
            }
        }));
        cases.add(new Case("a read lock of a name held as a mutex", invalid, bad, () -> {
            try (Lease held = locker.acquireBlocking("kind-taken")) {
                locker.readLock("kind-taken")
                        .acquireAsync(LockOptions.builder().wait(TEN_SECONDS).build())
                        .join();
            } catch (java.util.concurrent.CompletionException e) {
                throw e.getCause();
            }
        }));
        cases.add(new Case("a read lease at a fence", invalid, bad, () -> {
            try (Lease reading = locker.readLock("fenced-read").acquireBlocking()) {
                fence.checkBlocking(reading);
            }
        }));
        cases.add(new Case(
                "a server that is not there",
                LockUnavailableException.class,
                ErrorCode.UNAVAILABLE,
                () -> Locker.connect(
                        "redis://127.0.0.1:1",
                        ConnectOptions.builder()
                                .operationTimeout(Duration.ofSeconds(2))
                                .build())));

        List<DynamicTest> tests = new ArrayList<>();
        for (Case c : cases) {
            tests.add(DynamicTest.dynamicTest(c.what(), () -> {
                FencelockException e = assertThrows(c.expected(), c.body(), c.what());
                assertEquals(c.code(), e.getCode());
                assertFalse(e.getMessage().isBlank(), "an empty message");
            }));
        }
        tests.add(DynamicTest.dynamicTest("a refused password is AUTH and never shown", () -> {
            // Skips when FENCELOCK_TEST_BACKENDS leaves PostgreSQL out.
            String pg = Backends.url("postgres");
            String wrong = pg.replaceFirst(":[^:@/]+@", ":not-the-password-42@");
            assertTrue(wrong.contains("not-the-password-42"), "the test URL has a password");
            FencelockException e = assertThrows(FencelockException.class, () -> Locker.connect(wrong));
            assertFalse(e.getMessage().contains("not-the-password-42"), e.getMessage());
            if (e.getCode() == ErrorCode.UNAVAILABLE && !Backends.INSTANCE.getRequired()) {
                return; // no PostgreSQL here
            }
            assertEquals(ErrorCode.AUTH, e.getCode(), e.getMessage());
        }));
        tests.add(DynamicTest.dynamicTest("cleanup", () -> {
            fence.close();
            locker.close();
        }));
        return tests;
    }
}
