// Smoke test of the installed jar: two lockers on one SQLite file, the second is refused while
// the first holds the lock, and the next holder gets a larger token. Exits non-zero on failure.
import dev.fencelock.Lease;
import dev.fencelock.LockOptions;
import dev.fencelock.Locker;
import java.nio.file.Files;
import java.time.Duration;

public class Lock {
    public static void main(String[] args) throws Exception {
        String url = "sqlite://" + Files.createTempDirectory("fencelock-smoke") + "/smoke.db";
        LockOptions options = LockOptions.builder().ttl(Duration.ofSeconds(10)).wait(Duration.ofSeconds(5)).build();
        // A try never waits, so its options carry no wait.
        LockOptions once = LockOptions.builder().ttl(Duration.ofSeconds(10)).build();
        long heldToken;
        try (Locker first = Locker.connect(url); Locker second = Locker.connect(url)) {
            try (Lease lease = first.acquireBlocking("smoke", options)) {
                heldToken = lease.getToken();
                if (second.tryAcquireBlocking("smoke", once) != null) {
                    fail("a second locker acquired a held lock");
                }
            }
            try (Lease lease = second.acquireBlocking("smoke", options)) {
                if (lease.getToken() <= heldToken) {
                    fail("token did not increase: " + heldToken + " then " + lease.getToken());
                }
                System.out.println("jvm: tokens " + heldToken + " < " + lease.getToken() + " from "
                        + Locker.class.getProtectionDomain().getCodeSource().getLocation());
            }
        }
    }

    private static void fail(String message) {
        System.err.println("smoke: " + message);
        System.exit(1);
    }
}
