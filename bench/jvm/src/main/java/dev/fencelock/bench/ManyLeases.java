package dev.fencelock.bench;

import dev.fencelock.Lease;
import dev.fencelock.LockOptions;
import dev.fencelock.Locker;
import java.io.InputStream;
import java.io.OutputStream;
import java.lang.management.ManagementFactory;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * One JVM holding many locks on one Redis, renewed in the background: fencelock's leases (ttl
 * 30 s, auto-renew) or Redisson's RLocks taken with {@code lock()} (its watchdog, 30 s, renewing
 * every 10 s). Each library runs in a JVM of its own ({@code -Dbench.library=fencelock} or
 * {@code redisson}), takes {@code bench.leases} locks (default 10,000), holds them
 * {@code bench.seconds} (default 60), and prints one table row for the hold: the commands Redis
 * received (INFO commandstats: script calls and pings; the commands a script runs count there too), those per renewal period (10 s), the
 * process's CPU as a share of one core, and its resident memory (VmRSS) at the end of the hold
 * and the heap in use after a GC.
 *
 * <p>{@code bash bench/jvm/run.sh -Dbench.main=dev.fencelock.bench.ManyLeases
 * -Dbench.library=redisson} (and again with fencelock).
 */
public final class ManyLeases {
    private ManyLeases() {}

    /** The calls Redis has counted, over every command. */
    static long redisCalls(String hostPort) throws Exception {
        String[] parts = hostPort.split(":");
        try (Socket socket = new Socket(parts[0], Integer.parseInt(parts[1]))) {
            OutputStream out = socket.getOutputStream();
            out.write("INFO commandstats\r\n".getBytes(StandardCharsets.US_ASCII));
            out.flush();
            InputStream in = socket.getInputStream();
            StringBuilder header = new StringBuilder();
            int c;
            while ((c = in.read()) != '\n') {
                header.append((char) c);
            }
            int length = Integer.parseInt(header.toString().trim().substring(1));
            byte[] body = in.readNBytes(length);
            long calls = 0;
            for (String line : new String(body, StandardCharsets.US_ASCII).split("\r\n")) {
                // The commands a script runs count there too: the requests are the script calls
                // and the pings.
                boolean request = line.startsWith("cmdstat_eval") || line.startsWith("cmdstat_fcall")
                    || line.startsWith("cmdstat_ping");
                int at = line.indexOf("calls=");
                if (request && at >= 0) {
                    calls += Long.parseLong(line.substring(at + 6, line.indexOf(',', at)));
                }
            }
            return calls;
        }
    }

    static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
            .getProcessCpuTime();
    }

    static double rssMb() throws Exception {
        for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
            if (line.startsWith("VmRSS:")) {
                return Long.parseLong(line.replaceAll("[^0-9]", "")) / 1024.0;
            }
        }
        return 0;
    }

    public static void main(String[] args) throws Exception {
        String hostPort = args.length > 0 ? args[0] : "127.0.0.1:7001";
        String library = System.getProperty("bench.library", "fencelock");
        int leases = Integer.getInteger("bench.leases", 10_000);
        long seconds = Long.getLong("bench.seconds", 60);
        Duration ttl = Duration.ofSeconds(30);

        List<Runnable> releases = new ArrayList<>(leases);
        List<Runnable> closes = new ArrayList<>();
        java.util.function.Supplier<Long> lost;
        long started = System.nanoTime();
        if (library.equals("fencelock")) {
            Locker locker = Locker.connect("redis://" + hostPort);
            LockOptions options = LockOptions.builder().ttl(ttl).build();
            List<Lease> held = new ArrayList<>(leases);
            for (int i = 0; i < leases; i++) {
                Lease lease = locker.acquireBlocking("bench-many-jvm-" + i, options);
                held.add(lease);
                releases.add(lease::releaseBlocking);
            }
            lost = () -> held.stream().filter(l -> !l.isHeld()).count();
            closes.add(locker::close);
        } else {
            Config config = new Config();
            config.useSingleServer().setAddress("redis://" + hostPort);
            config.setLockWatchdogTimeout(ttl.toMillis());
            RedissonClient client = Redisson.create(config);
            List<RLock> held = new ArrayList<>(leases);
            for (int i = 0; i < leases; i++) {
                RLock lock = client.getLock("bench-many-redisson-" + i);
                lock.lock();
                held.add(lock);
                releases.add(lock::unlock);
            }
            lost = () -> held.stream().filter(l -> !l.isHeldByCurrentThread()).count();
            closes.add(client::shutdown);
        }
        double acquiredIn = (System.nanoTime() - started) / 1e9;

        long callsBefore = redisCalls(hostPort);
        long cpuBefore = cpuNanos();
        long holdStarted = System.nanoTime();
        Thread.sleep(seconds * 1000);
        double heldFor = (System.nanoTime() - holdStarted) / 1e9;
        long calls = redisCalls(hostPort) - callsBefore;
        double cpu = (cpuNanos() - cpuBefore) / 1e9 / heldFor;
        double rss = rssMb();
        System.gc();
        Runtime runtime = Runtime.getRuntime();
        double heap = (runtime.totalMemory() - runtime.freeMemory()) / 1048576.0;
        long lostCount = lost.get();
        double periods = heldFor / (ttl.toMillis() / 3000.0);

        for (Runnable release : releases) {
            release.run();
        }
        for (Runnable close : closes) {
            close.run();
        }
        System.out.printf(
            "| %s | %d | %.1f s | %d | %.0f | %.2f%% | %.0f MB | %.0f MB | %d |%n",
            library, leases, acquiredIn, calls, calls / periods, cpu * 100, rss, heap, lostCount);
        System.out.printf("JDK %s; %s%n", Runtime.version(), java.time.Instant.now());
        System.exit(0);
    }
}
