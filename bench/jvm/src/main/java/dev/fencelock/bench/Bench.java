package dev.fencelock.bench;

import dev.fencelock.Lease;
import dev.fencelock.Lock;
import dev.fencelock.LockOptions;
import dev.fencelock.Locker;
import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.function.BiFunction;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.redisson.Redisson;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * fencelock's JVM binding against Redisson (RLock, RFencedLock) on one Redis and Apache Curator
 * (InterProcessMutex) on one ZooKeeper, in one run, on the same servers:
 *
 * - uncontended: one thread, one client, acquire + release of one name, back to back; the
 *   libraries of one server take turns in rounds (see {@link #uncontendedRounds});
 * - handoff: two threads with a client each take turns strictly; each holds the lock for
 *   2 ms while the other waits inside its library's acquire, so the handoff is the time from
 *   the release call to the waiter's acquire returning.
 *
 * Semaphores (suite "semaphore"): fencelock's {@code locker.semaphore(name, 3)} against Redisson's
 * RPermitExpirableSemaphore (3 permits, each acquired with a 30 s lease time) and Curator's
 * InterProcessSemaphoreV2 (3 leases). Read locks (suite "rwlock"): fencelock's
 * {@code locker.readLock(name)} against Redisson's RReadWriteLock and Curator's
 * InterProcessReadWriteLock, read side. For each:
 *
 * - uncontended: as for the mutex, one client taking a permit (or the read lock) and giving it
 *   back, the libraries of one server in alternating rounds;
 * - contended, in alternating rounds of 1 s per library: 8 clients (each its own connection, on
 *   its own thread) on one semaphore of 3 permits, each holding 2 ms and working 1 ms between
 *   sections, so about 5 wait at any moment; or 8 readers on one read-write lock, back to back.
 *   ops/s is sections per second (the median round's, the ratio the median of the round-by-round
 *   ratios); p50/p99 is the wait, from calling acquire to holding. Every section counts the holders
 *   at that moment: more than 3 permits at once is reported as over the limit.
 *
 * Arguments: [redis host:port] [zookeeper host:port]; defaults 127.0.0.1:7001 and 127.0.0.1:2181.
 * System properties: bench.suites (comma-separated, of mutex, semaphore, rwlock; default all),
 * bench.runs (whole runs one after another, default 1; with more, a table of every run's ratios and
 * their medians follows), and for quick looks bench.only (run only the libraries whose label
 * contains it), bench.rounds, bench.cycles, bench.contendedRounds, bench.contendedMillis,
 * bench.skipHandoff.
 */
public final class Bench {
    static final int WARMUP = 300;
    static final int CYCLES = 1000;
    static final int ROUNDS = 10;
    static final int HANDOFFS = 300;
    static final long HOLD_NANOS = Duration.ofMillis(2).toNanos();
    static final long THINK_NANOS = Duration.ofMillis(1).toNanos();
    static final int PERMITS = 3;
    static final int CONTENDERS = 8;
    static final int CONTENDED_ROUNDS = 6;
    static final long CONTENDED_ROUND_MILLIS = 1000;
    static final Duration LEASE = Duration.ofSeconds(30);

    static final String MUTEX_SOLO = "uncontended cycle";
    static final String MUTEX_HANDOFF = "handoff, 2 clients, 2 ms hold";
    static final String PERMIT_SOLO = "uncontended permit cycle, " + PERMITS + " permits";
    static final String PERMIT_SHARED =
        CONTENDERS + " clients, " + PERMITS + " permits, 2 ms hold, 1 ms between";
    static final String READ_SOLO = "uncontended read-lock cycle";
    static final String READ_SHARED = CONTENDERS + " readers, back to back";

    /** One client of one library, holding at most one lock at a time. */
    interface Client extends AutoCloseable {
        void acquire() throws Exception;

        void release() throws Exception;

        @Override
        void close() throws Exception;
    }

    interface Library {
        Client open(String name) throws Exception;
    }

    /**
     * One library's numbers. For the workloads run in rounds, {@code perRound} holds its throughput
     * in each round, so that fencelock's can be compared with another library's round by round, and
     * the ratio is by throughput; otherwise (the handoff) it is by p50 latency. {@code note} says
     * what else a contended round saw (the most holders at once).
     */
    record Result(String workload, String library, double opsPerSecond, double p50Ms, double p99Ms,
            double[] perRound, String note) {
        Result(String workload, String library, double opsPerSecond, double p50Ms, double p99Ms) {
            this(workload, library, opsPerSecond, p50Ms, p99Ms, null, "");
        }

        boolean contended() {
            return perRound != null && !workload.startsWith("uncontended");
        }
    }

    /**
     * fencelock's throughput over another's: the median of the round-by-round ratios (each pair
     * ran back to back, so both saw the same load), or of the whole runs when not in rounds.
     */
    static double throughputRatio(Result ours, Result theirs) {
        if (ours.perRound() == null || theirs.perRound() == null) {
            return ours.opsPerSecond() / theirs.opsPerSecond();
        }
        double[] ratios = new double[ours.perRound().length];
        for (int i = 0; i < ratios.length; i++) {
            ratios[i] = ours.perRound()[i] / theirs.perRound()[i];
        }
        return median(ratios);
    }

    static double median(double[] values) {
        double[] sorted = values.clone();
        Arrays.sort(sorted);
        int n = sorted.length;
        return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    }

    static double load() {
        return ManagementFactory.getOperatingSystemMXBean().getSystemLoadAverage();
    }

    public static void main(String[] args) throws Exception {
        String redis = args.length > 0 ? args[0] : "127.0.0.1:7001";
        String zk = args.length > 1 ? args[1] : "127.0.0.1:2181";
        Set<String> suites = Set.of(System.getProperty("bench.suites", "mutex,semaphore,rwlock").split(","));
        int runs = Integer.getInteger("bench.runs", 1);

        // Every run's ratios, by "workload | library | ratio of", in run order.
        Map<String, double[]> ratios = new LinkedHashMap<>();
        double[] loadsBefore = new double[runs];
        double[] loadsAfter = new double[runs];
        for (int run = 0; run < runs; run++) {
            loadsBefore[run] = load();
            System.out.printf("%n### Run %d of %d (%s, load average %.2f before it)%n%n", run + 1, runs,
                Instant.now(), loadsBefore[run]);
            List<Result> results = runOnce(redis, zk, suites);
            Map<String, Double> these = printTable(results);
            for (Map.Entry<String, Double> e : these.entrySet()) {
                ratios.computeIfAbsent(e.getKey(), k -> new double[runs])[run] = e.getValue();
            }
            loadsAfter[run] = load();
            System.out.printf("%nLoad average after run %d: %.2f%n", run + 1, loadsAfter[run]);
        }
        if (runs > 1) {
            System.out.println();
            System.out.println("### Every run's ratios (fencelock / the other library; above 1.00x fencelock is faster)");
            System.out.println();
            StringBuilder head = new StringBuilder("| workload | fencelock against | ratio of |");
            StringBuilder rule = new StringBuilder("|---|---|---|");
            for (int run = 0; run < runs; run++) {
                head.append(" run ").append(run + 1).append(" |");
                rule.append("---|");
            }
            System.out.println(head.append(" median |"));
            System.out.println(rule.append("---|"));
            for (Map.Entry<String, double[]> e : ratios.entrySet()) {
                StringBuilder row = new StringBuilder("| ").append(e.getKey()).append(" |");
                for (double r : e.getValue()) {
                    row.append(String.format(" %.2fx |", r));
                }
                System.out.println(row.append(String.format(" **%.2fx** |", median(e.getValue()))));
            }
            StringBuilder loads = new StringBuilder("| load average before / after the run | | |");
            for (int run = 0; run < runs; run++) {
                loads.append(String.format(" %.2f / %.2f |", loadsBefore[run], loadsAfter[run]));
            }
            System.out.println(loads.append(" |"));
        }
        System.out.printf("%nJDK %s; %s.%n", Runtime.version(), Instant.now());
        System.exit(0);
    }

    /** One run: every suite asked for, each library of a server taking turns with the others. */
    static List<Result> runOnce(String redis, String zk, Set<String> suites) throws Exception {
        String only = System.getProperty("bench.only", "");
        boolean handoffs = !Boolean.getBoolean("bench.skipHandoff");
        List<Result> results = new ArrayList<>();
        if (suites.contains("mutex")) {
            Map<String, Library> redisLibraries = new LinkedHashMap<>();
            redisLibraries.put("fencelock (Redis)", fencelock("redis://" + redis));
            redisLibraries.put("Redisson RLock", redisson(redis, false));
            redisLibraries.put("Redisson RFencedLock", redisson(redis, true));
            Map<String, Library> zkLibraries = new LinkedHashMap<>();
            zkLibraries.put("fencelock (ZooKeeper)", fencelock("zk://" + zk));
            zkLibraries.put("Curator InterProcessMutex", curator(zk));
            for (Map<String, Library> group : List.of(redisLibraries, zkLibraries)) {
                group.keySet().removeIf(k -> !k.contains(only) && !only.isEmpty());
                if (group.isEmpty()) {
                    continue;
                }
                results.addAll(uncontendedRounds(MUTEX_SOLO, group));
                for (Map.Entry<String, Library> e : group.entrySet()) {
                    if (handoffs) {
                        results.add(handoff(e.getKey(), e.getValue()));
                    }
                }
            }
        }
        if (suites.contains("semaphore")) {
            Map<String, Library> redisLibraries = new LinkedHashMap<>();
            redisLibraries.put("fencelock semaphore (Redis)",
                fencelockLock("redis://" + redis, (locker, name) -> locker.semaphore(name, PERMITS)));
            redisLibraries.put("Redisson RPermitExpirableSemaphore", redissonSemaphore(redis));
            redisLibraries.put("Redisson RSemaphore", redissonCountingSemaphore(redis));
            Map<String, Library> zkLibraries = new LinkedHashMap<>();
            zkLibraries.put("fencelock semaphore (ZooKeeper)",
                fencelockLock("zk://" + zk, (locker, name) -> locker.semaphore(name, PERMITS)));
            zkLibraries.put("Curator InterProcessSemaphoreV2", curatorSemaphore(zk));
            for (Map<String, Library> group : List.of(redisLibraries, zkLibraries)) {
                group.keySet().removeIf(k -> !k.contains(only) && !only.isEmpty());
                if (!group.isEmpty()) {
                    results.addAll(uncontendedRounds(PERMIT_SOLO, group));
                    results.addAll(contendedRounds(PERMIT_SHARED, group, PERMITS, HOLD_NANOS, THINK_NANOS));
                }
            }
        }
        if (suites.contains("rwlock")) {
            Map<String, Library> redisLibraries = new LinkedHashMap<>();
            redisLibraries.put("fencelock read lock (Redis)",
                fencelockLock("redis://" + redis, (locker, name) -> locker.readLock(name)));
            redisLibraries.put("Redisson RReadWriteLock read lock", redissonReadLock(redis));
            Map<String, Library> zkLibraries = new LinkedHashMap<>();
            zkLibraries.put("fencelock read lock (ZooKeeper)",
                fencelockLock("zk://" + zk, (locker, name) -> locker.readLock(name)));
            zkLibraries.put("Curator InterProcessReadWriteLock read lock", curatorReadLock(zk));
            for (Map<String, Library> group : List.of(redisLibraries, zkLibraries)) {
                group.keySet().removeIf(k -> !k.contains(only) && !only.isEmpty());
                if (!group.isEmpty()) {
                    results.addAll(uncontendedRounds(READ_SOLO, group));
                    results.addAll(contendedRounds(READ_SHARED, group, 0, 0, 0));
                }
            }
        }
        return results;
    }

    /**
     * Prints one run's table and returns its ratios, by "workload | library | ratio of": throughput
     * for the workloads run in rounds (plus the wait p50 for the contended ones), p50 latency for the
     * handoff.
     */
    static Map<String, Double> printTable(List<Result> results) {
        Map<String, Double> ratios = new LinkedHashMap<>();
        System.out.println("| workload | library | ops/s | p50 ms | p99 ms | fencelock vs it | notes |");
        System.out.println("|---|---|---|---|---|---|---|");
        for (Result r : results) {
            Result ours = results.stream()
                .filter(o -> o.workload().equals(r.workload()) && o.library().startsWith("fencelock")
                    && sameServer(o.library(), r.library()))
                .findFirst().orElse(r);
            String ratio = "";
            if (r != ours) {
                String key = r.workload() + " | " + r.library();
                if (r.perRound() != null) {
                    double byThroughput = throughputRatio(ours, r);
                    ratios.put(key + " | ops/s", byThroughput);
                    ratio = String.format("%.2fx", byThroughput);
                    if (r.contended()) {
                        double byWait = r.p50Ms() / ours.p50Ms();
                        ratios.put(key + " | wait p50", byWait);
                        ratio += String.format(" (wait p50 %.2fx)", byWait);
                    }
                } else {
                    double byLatency = r.p50Ms() / ours.p50Ms();
                    ratios.put(key + " | handoff p50", byLatency);
                    ratio = String.format("%.2fx", byLatency);
                }
            }
            System.out.printf("| %s | %s | %.0f | %.3f | %.3f | %s | %s |%n",
                r.workload(), r.library(), r.opsPerSecond(), r.p50Ms(), r.p99Ms(), ratio, r.note());
        }
        System.out.println();
        System.out.println("Workloads in rounds: ops/s is the median round's; the ratio is the median of the round-by-round"
            + " throughput ratios; contended p50/p99 are the wait for a permit or read lock, and \"wait p50\" compares"
            + " them (theirs / ours). Handoff ratios compare the median handoff latency.");
        return ratios;
    }

    static boolean sameServer(String a, String b) {
        boolean aZk = a.contains("ZooKeeper") || a.contains("Curator");
        boolean bZk = b.contains("ZooKeeper") || b.contains("Curator");
        return aZk == bZk;
    }

    /**
     * Every library of one server in turns: one client each, warmed up, then ROUNDS rounds in
     * which each library runs CYCLES cycles back to back. A library's throughput is the median of
     * its rounds, so a burst of load on the machine hits one round of each library alike instead
     * of all of one library's cycles; its latencies are over all of its cycles.
     */
    static List<Result> uncontendedRounds(String workload, Map<String, Library> group) throws Exception {
        int rounds = Integer.getInteger("bench.rounds", ROUNDS);
        int cycles = Integer.getInteger("bench.cycles", CYCLES);
        Map<String, Client> clients = new LinkedHashMap<>();
        Map<String, String> names = new LinkedHashMap<>();
        Map<String, double[]> throughputs = new LinkedHashMap<>();
        Map<String, long[]> latencies = new LinkedHashMap<>();
        try {
            for (Map.Entry<String, Library> e : group.entrySet()) {
                String name = "bench-jvm-" + UUID.randomUUID();
                Client client = e.getValue().open(name);
                clients.put(e.getKey(), client);
                names.put(e.getKey(), name);
                for (int i = 0; i < WARMUP; i++) {
                    client.acquire();
                    client.release();
                }
                throughputs.put(e.getKey(), new double[rounds]);
                latencies.put(e.getKey(), new long[rounds * cycles]);
            }
            for (int round = 0; round < rounds; round++) {
                for (Map.Entry<String, Client> e : clients.entrySet()) {
                    Client client = e.getValue();
                    long[] took = latencies.get(e.getKey());
                    long start = System.nanoTime();
                    for (int i = 0; i < cycles; i++) {
                        long t0 = System.nanoTime();
                        client.acquire();
                        client.release();
                        took[round * cycles + i] = System.nanoTime() - t0;
                    }
                    throughputs.get(e.getKey())[round] = cycles / ((System.nanoTime() - start) / 1e9);
                }
            }
        } finally {
            for (Client client : clients.values()) {
                client.close();
            }
        }
        List<Result> results = new ArrayList<>();
        for (String library : clients.keySet()) {
            double[] perRound = throughputs.get(library).clone();
            Arrays.sort(perRound);
            long[] sorted = latencies.get(library).clone();
            Arrays.sort(sorted);
            double p50 = sorted[sorted.length / 2] / 1e6;
            double p99 = sorted[(int) Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.99) - 1)] / 1e6;
            Result r = new Result(workload, library, perRound[perRound.length / 2], p50, p99,
                throughputs.get(library), "");
            System.err.printf("%s / %s: rounds %s ops/s (median %.0f), p50 %.3f ms, p99 %.3f ms%n",
                workload, library, Arrays.toString(Arrays.stream(throughputs.get(library)).mapToLong(Math::round).toArray()),
                r.opsPerSecond(), p50, p99);
            results.add(r);
        }
        return results;
    }

    /** What one contended round of one library saw. */
    record Round(int sections, long nanos, long[] waits, int mostAtOnce, int overLimit) {}

    /**
     * Every library of one server in turns, as {@link #uncontendedRounds}: CONTENDERS clients per
     * library, opened once, then rounds in which each library's clients run for
     * bench.contendedMillis on their own threads. {@code limit} is the semaphore's permits (0: read
     * locks, any number at once); each section holds {@code hold} and waits {@code think} before
     * asking again.
     */
    static List<Result> contendedRounds(String workload, Map<String, Library> group, int limit, long hold,
            long think) throws Exception {
        int rounds = Integer.getInteger("bench.contendedRounds", CONTENDED_ROUNDS);
        long roundNanos = Duration.ofMillis(Long.getLong("bench.contendedMillis", CONTENDED_ROUND_MILLIS)).toNanos();
        Map<String, Client[]> clients = new LinkedHashMap<>();
        Map<String, List<Round>> seen = new LinkedHashMap<>();
        try {
            for (Map.Entry<String, Library> e : group.entrySet()) {
                String name = "bench-jvm-" + UUID.randomUUID();
                Client[] mine = new Client[CONTENDERS];
                clients.put(e.getKey(), mine);
                for (int i = 0; i < mine.length; i++) {
                    mine[i] = e.getValue().open(name);
                }
                // Warm-up: a short round, not counted.
                contendedRound(mine, limit, hold, think, roundNanos / 4);
                seen.put(e.getKey(), new ArrayList<>());
            }
            for (int round = 0; round < rounds; round++) {
                for (Map.Entry<String, Client[]> e : clients.entrySet()) {
                    seen.get(e.getKey()).add(contendedRound(e.getValue(), limit, hold, think, roundNanos));
                }
            }
        } finally {
            for (Client[] mine : clients.values()) {
                for (Client client : mine) {
                    if (client != null) {
                        client.close();
                    }
                }
            }
        }
        List<Result> results = new ArrayList<>();
        for (Map.Entry<String, List<Round>> e : seen.entrySet()) {
            List<Round> all = e.getValue();
            double[] perRound = all.stream().mapToDouble(r -> r.sections() / (r.nanos() / 1e9)).toArray();
            long[] waits = all.stream().flatMapToLong(r -> Arrays.stream(r.waits())).sorted().toArray();
            double p50 = waits[waits.length / 2] / 1e6;
            double p99 = waits[(int) Math.min(waits.length - 1, Math.ceil(waits.length * 0.99) - 1)] / 1e6;
            int most = all.stream().mapToInt(Round::mostAtOnce).max().orElse(0);
            int over = all.stream().mapToInt(Round::overLimit).sum();
            String note = "most holders at once: " + most + (limit > 0 ? ", over the limit: " + over : "");
            if (over > 0) {
                System.err.printf("PERMIT LIMIT VIOLATED: %s / %s: %d sections over %d permits%n", workload,
                    e.getKey(), over, limit);
            }
            Result r = new Result(workload, e.getKey(), median(perRound), p50, p99, perRound, note);
            System.err.printf("%s / %s: rounds %s sections/s (median %.0f), wait p50 %.3f ms, p99 %.3f ms, %s%n",
                workload, e.getKey(), Arrays.toString(Arrays.stream(perRound).mapToLong(Math::round).toArray()),
                r.opsPerSecond(), p50, p99, note);
            results.add(r);
        }
        return results;
    }

    static Round contendedRound(Client[] clients, int limit, long hold, long think, long roundNanos) throws Exception {
        AtomicInteger holders = new AtomicInteger();
        AtomicInteger most = new AtomicInteger();
        AtomicInteger over = new AtomicInteger();
        long[][] waits = new long[clients.length][];
        Throwable[] failure = new Throwable[1];
        CountDownLatch go = new CountDownLatch(1);
        long[] startedAt = new long[1];
        Thread[] threads = new Thread[clients.length];
        for (int t = 0; t < clients.length; t++) {
            int me = t;
            threads[t] = new Thread(() -> {
                long[] mine = new long[1024];
                int n = 0;
                try {
                    go.await();
                    long stopAt = startedAt[0] + roundNanos;
                    while (System.nanoTime() < stopAt) {
                        long asked = System.nanoTime();
                        clients[me].acquire();
                        long holding = System.nanoTime();
                        // Counted after acquire returned and before release is called: inside the real hold.
                        int now = holders.incrementAndGet();
                        most.accumulateAndGet(now, Math::max);
                        if (limit > 0 && now > limit) {
                            over.incrementAndGet();
                        }
                        pause(hold);
                        holders.decrementAndGet();
                        clients[me].release();
                        if (n == mine.length) {
                            mine = Arrays.copyOf(mine, n * 2);
                        }
                        mine[n++] = holding - asked;
                        pause(think);
                    }
                } catch (Throwable e) {
                    synchronized (failure) {
                        if (failure[0] == null) {
                            failure[0] = e;
                        }
                    }
                }
                waits[me] = Arrays.copyOf(mine, n);
            }, "contender-" + t);
            threads[t].start();
        }
        startedAt[0] = System.nanoTime();
        go.countDown();
        for (Thread th : threads) {
            th.join(300_000);
        }
        long nanos = System.nanoTime() - startedAt[0];
        if (failure[0] != null) {
            throw new RuntimeException("contended round failed", failure[0]);
        }
        long[] all = Arrays.stream(waits).flatMapToLong(Arrays::stream).toArray();
        return new Round(all.length, nanos, all, most.get(), over.get());
    }

    /** Sleeps {@code nanos} (parkNanos may return early). */
    static void pause(long nanos) {
        if (nanos <= 0) {
            return;
        }
        long until = System.nanoTime() + nanos;
        for (long left = nanos; left > 0; left = until - System.nanoTime()) {
            LockSupport.parkNanos(left);
        }
    }

    static Result handoff(String library, Library lib) throws Exception {
        String name = "bench-jvm-" + UUID.randomUUID();
        Client[] clients = {lib.open(name), lib.open(name)};
        AtomicLong releasedAt = new AtomicLong();
        AtomicInteger holder = new AtomicInteger(-1);
        AtomicInteger count = new AtomicInteger();
        long[] took = new long[HANDOFFS + 2 * WARMUP / 10 + 4];
        AtomicInteger measured = new AtomicInteger();
        int warm = WARMUP / 10;
        Thread[] threads = new Thread[2];
        Throwable[] failure = new Throwable[1];
        long start = System.nanoTime();
        for (int t = 0; t < 2; t++) {
            int me = t;
            threads[t] = new Thread(() -> {
                try {
                    while (true) {
                        clients[me].acquire();
                        long now = System.nanoTime();
                        int n = count.incrementAndGet();
                        if (n > warm + 1 && n <= warm + 1 + HANDOFFS) {
                            took[measured.getAndIncrement()] = now - releasedAt.get();
                        }
                        holder.set(me);
                        long until = System.nanoTime() + HOLD_NANOS;
                        while (System.nanoTime() < until) {
                            Thread.onSpinWait();
                        }
                        boolean last = n >= warm + 1 + HANDOFFS;
                        releasedAt.set(System.nanoTime());
                        clients[me].release();
                        if (last) {
                            return;
                        }
                        // Strict turns: wait until the other thread has the lock before asking again.
                        while (holder.get() == me && count.get() == n) {
                            if (count.get() > warm + 1 + HANDOFFS) {
                                return;
                            }
                            Thread.onSpinWait();
                        }
                        if (count.get() > warm + HANDOFFS) {
                            return;
                        }
                    }
                } catch (Throwable e) {
                    failure[0] = e;
                }
            }, "handoff-" + t);
        }
        for (Thread th : threads) {
            th.start();
        }
        for (Thread th : threads) {
            th.join(300_000);
        }
        long total = System.nanoTime() - start;
        for (Client c : clients) {
            c.close();
        }
        if (failure[0] != null) {
            throw new RuntimeException(library + " handoff failed", failure[0]);
        }
        long[] samples = Arrays.copyOf(took, measured.get());
        return summary(MUTEX_HANDOFF, library, count.get(), total, samples);
    }

    static Result summary(String workload, String library, int ops, long totalNanos, long[] took) {
        long[] sorted = took.clone();
        Arrays.sort(sorted);
        double p50 = sorted[sorted.length / 2] / 1e6;
        double p99 = sorted[(int) Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.99) - 1)] / 1e6;
        Result r = new Result(workload, library, ops / (totalNanos / 1e9), p50, p99);
        System.err.printf("%s / %s: %.0f ops/s, p50 %.3f ms, p99 %.3f ms%n", workload, library, r.opsPerSecond(), p50, p99);
        return r;
    }

    static Library fencelock(String url) {
        LockOptions options = LockOptions.builder().ttl(Duration.ofSeconds(30)).build();
        return name -> {
            Locker locker = Locker.connect(url);
            return new Client() {
                Lease lease;

                public void acquire() {
                    lease = locker.acquireBlocking(name, options);
                }

                public void release() {
                    lease.releaseBlocking();
                }

                public void close() {
                    locker.close();
                }
            };
        };
    }

    /** fencelock's {@link Lock} in one mode ({@code locker.semaphore(name, n)}, {@code locker.readLock(name)}). */
    static Library fencelockLock(String url, BiFunction<Locker, String, Lock> kind) {
        LockOptions options = LockOptions.builder().ttl(LEASE).build();
        return name -> {
            Locker locker = Locker.connect(url);
            Lock lock = kind.apply(locker, name);
            return new Client() {
                Lease lease;

                public void acquire() {
                    lease = lock.acquireBlocking(options);
                }

                public void release() {
                    lease.releaseBlocking();
                }

                public void close() {
                    locker.close();
                }
            };
        };
    }

    static RedissonClient redissonClient(String hostPort) {
        Config config = new Config();
        config.useSingleServer().setAddress("redis://" + hostPort).setConnectionMinimumIdleSize(2);
        return Redisson.create(config);
    }

    /**
     * Redisson's RPermitExpirableSemaphore, each permit acquired with a 30 s lease time (fencelock's
     * ttl) and released by its id. Of Redisson's two semaphores it is the one with fencelock's
     * semantics: a permit belongs to its acquire (an id) and comes back by itself when its holder dies
     * without releasing. An RSemaphore permit is a bare counter decrement: anyone may release it, and
     * one whose holder crashed is gone for good.
     */
    static Library redissonSemaphore(String hostPort) {
        return name -> {
            RedissonClient client = redissonClient(hostPort);
            RPermitExpirableSemaphore semaphore = client.getPermitExpirableSemaphore(name);
            semaphore.trySetPermits(PERMITS);
            return new Client() {
                String permit;

                public void acquire() throws InterruptedException {
                    permit = semaphore.acquire(LEASE.toMillis(), TimeUnit.MILLISECONDS);
                }

                public void release() {
                    semaphore.release(permit);
                }

                public void close() {
                    client.shutdown();
                }
            };
        };
    }

    /**
     * Redisson's RSemaphore of 3 permits: acquire() and release() move a counter, nothing more (a
     * permit has no owner and no expiry, so a crashed holder's permit is gone for good). Listed
     * because it is the semaphore Redisson users reach for first; the fair comparison is the
     * expirable one above.
     */
    static Library redissonCountingSemaphore(String hostPort) {
        return name -> {
            RedissonClient client = redissonClient(hostPort);
            RSemaphore semaphore = client.getSemaphore(name);
            semaphore.trySetPermits(PERMITS);
            return new Client() {
                public void acquire() throws InterruptedException {
                    semaphore.acquire();
                }

                public void release() {
                    semaphore.release();
                }

                public void close() {
                    client.shutdown();
                }
            };
        };
    }

    /** Redisson's RReadWriteLock, read side, with its watchdog (lock() without a lease time). */
    static Library redissonReadLock(String hostPort) {
        return name -> {
            RedissonClient client = redissonClient(hostPort);
            RLock read = client.getReadWriteLock(name).readLock();
            return new Client() {
                public void acquire() {
                    read.lock();
                }

                public void release() {
                    read.unlock();
                }

                public void close() {
                    client.shutdown();
                }
            };
        };
    }

    static Library redisson(String hostPort, boolean fenced) {
        return name -> {
            Config config = new Config();
            config.useSingleServer().setAddress("redis://" + hostPort).setConnectionMinimumIdleSize(2);
            RedissonClient client = Redisson.create(config);
            RLock lock = fenced ? client.getFencedLock(name) : client.getLock(name);
            return new Client() {
                public void acquire() {
                    if (fenced) {
                        ((RFencedLock) lock).lockAndGetToken();
                    } else {
                        lock.lock();
                    }
                }

                public void release() {
                    lock.unlock();
                }

                public void close() {
                    client.shutdown();
                }
            };
        };
    }

    static CuratorFramework curatorClient(String hostPort) throws InterruptedException {
        CuratorFramework client = CuratorFrameworkFactory.newClient(hostPort, new ExponentialBackoffRetry(100, 3));
        client.start();
        client.blockUntilConnected();
        return client;
    }

    /** Curator's InterProcessSemaphoreV2 with 3 leases: acquire() and returnLease(lease). */
    static Library curatorSemaphore(String hostPort) {
        return name -> {
            CuratorFramework client = curatorClient(hostPort);
            InterProcessSemaphoreV2 semaphore = new InterProcessSemaphoreV2(client, "/bench-jvm/" + name, PERMITS);
            return new Client() {
                org.apache.curator.framework.recipes.locks.Lease lease;

                public void acquire() throws Exception {
                    lease = semaphore.acquire();
                }

                public void release() {
                    semaphore.returnLease(lease);
                }

                public void close() {
                    client.close();
                }
            };
        };
    }

    /** Curator's InterProcessReadWriteLock, read side. */
    static Library curatorReadLock(String hostPort) {
        return name -> {
            CuratorFramework client = curatorClient(hostPort);
            InterProcessMutex read = new InterProcessReadWriteLock(client, "/bench-jvm/" + name).readLock();
            return new Client() {
                public void acquire() throws Exception {
                    read.acquire();
                }

                public void release() throws Exception {
                    read.release();
                }

                public void close() {
                    client.close();
                }
            };
        };
    }

    static Library curator(String hostPort) {
        return name -> {
            CuratorFramework client = curatorClient(hostPort);
            InterProcessMutex mutex = new InterProcessMutex(client, "/bench-jvm/" + name);
            return new Client() {
                public void acquire() throws Exception {
                    mutex.acquire();
                }

                public void release() throws Exception {
                    mutex.release();
                }

                public void close() {
                    client.close();
                }
            };
        };
    }
}
