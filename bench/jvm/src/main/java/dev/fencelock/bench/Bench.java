package dev.fencelock.bench;

import dev.fencelock.Lease;
import dev.fencelock.LockOptions;
import dev.fencelock.Locker;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.redisson.Redisson;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
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
 * Arguments: [redis host:port] [zookeeper host:port]; defaults 127.0.0.1:7001 and 127.0.0.1:2181.
 * System properties, for quick looks: bench.only (run only the libraries whose label contains
 * it), bench.rounds, bench.skipHandoff.
 */
public final class Bench {
    static final int WARMUP = 300;
    static final int CYCLES = 1000;
    static final int ROUNDS = 10;
    static final int HANDOFFS = 300;
    static final long HOLD_NANOS = Duration.ofMillis(2).toNanos();

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
     * One library's numbers. For the uncontended rounds, {@code perRound} holds its throughput in
     * each round, so that fencelock's can be compared with another library's round by round.
     */
    record Result(String workload, String library, double opsPerSecond, double p50Ms, double p99Ms, double[] perRound) {
        Result(String workload, String library, double opsPerSecond, double p50Ms, double p99Ms) {
            this(workload, library, opsPerSecond, p50Ms, p99Ms, null);
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
        Arrays.sort(ratios);
        int n = ratios.length;
        return n % 2 == 1 ? ratios[n / 2] : (ratios[n / 2 - 1] + ratios[n / 2]) / 2;
    }

    public static void main(String[] args) throws Exception {
        String redis = args.length > 0 ? args[0] : "127.0.0.1:7001";
        String zk = args.length > 1 ? args[1] : "127.0.0.1:2181";

        Map<String, Library> redisLibraries = new LinkedHashMap<>();
        redisLibraries.put("fencelock (Redis)", fencelock("redis://" + redis));
        redisLibraries.put("Redisson RLock", redisson(redis, false));
        redisLibraries.put("Redisson RFencedLock", redisson(redis, true));
        Map<String, Library> zkLibraries = new LinkedHashMap<>();
        zkLibraries.put("fencelock (ZooKeeper)", fencelock("zk://" + zk));
        zkLibraries.put("Curator InterProcessMutex", curator(zk));

        String only = System.getProperty("bench.only", "");
        redisLibraries.keySet().removeIf(k -> !k.contains(only) && !only.isEmpty());
        zkLibraries.keySet().removeIf(k -> !k.contains(only) && !only.isEmpty());
        boolean handoffs = !Boolean.getBoolean("bench.skipHandoff");

        List<Result> results = new ArrayList<>();
        for (Map<String, Library> group : List.of(redisLibraries, zkLibraries)) {
            if (group.isEmpty()) {
                continue;
            }
            results.addAll(uncontendedRounds(group));
            for (Map.Entry<String, Library> e : group.entrySet()) {
                if (handoffs) {
                    results.add(handoff(e.getKey(), e.getValue()));
                }
            }
        }
        System.out.println("| workload | library | ops/s | p50 ms | p99 ms | fencelock vs it |");
        System.out.println("|---|---|---|---|---|---|");
        for (Result r : results) {
            Result ours = results.stream()
                .filter(o -> o.workload().equals(r.workload()) && o.library().startsWith("fencelock")
                    && sameServer(o.library(), r.library()))
                .findFirst().orElse(r);
            String ratio = r == ours ? "" : String.format("%.2fx", r.workload().startsWith("uncontended")
                ? throughputRatio(ours, r)
                : r.p50Ms() / ours.p50Ms());
            System.out.printf("| %s | %s | %.0f | %.3f | %.3f | %s |%n",
                r.workload(), r.library(), r.opsPerSecond(), r.p50Ms(), r.p99Ms(), ratio);
        }
        System.out.println();
        System.out.println("Uncontended: ops/s is the median round's; the ratio is the median of the round-by-round"
            + " throughput ratios. Handoff ratios compare the median handoff latency.");
        System.exit(0);
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
    static List<Result> uncontendedRounds(Map<String, Library> group) throws Exception {
        int rounds = Integer.getInteger("bench.rounds", ROUNDS);
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
                latencies.put(e.getKey(), new long[rounds * CYCLES]);
            }
            for (int round = 0; round < rounds; round++) {
                for (Map.Entry<String, Client> e : clients.entrySet()) {
                    Client client = e.getValue();
                    long[] took = latencies.get(e.getKey());
                    long start = System.nanoTime();
                    for (int i = 0; i < CYCLES; i++) {
                        long t0 = System.nanoTime();
                        client.acquire();
                        client.release();
                        took[round * CYCLES + i] = System.nanoTime() - t0;
                    }
                    throughputs.get(e.getKey())[round] = CYCLES / ((System.nanoTime() - start) / 1e9);
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
            Result r = new Result("uncontended cycle", library, perRound[perRound.length / 2], p50, p99,
                throughputs.get(library));
            System.err.printf("uncontended cycle / %s: rounds %s ops/s (median %.0f), p50 %.3f ms, p99 %.3f ms%n",
                library, Arrays.toString(Arrays.stream(throughputs.get(library)).mapToLong(Math::round).toArray()),
                r.opsPerSecond(), p50, p99);
            results.add(r);
        }
        return results;
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
        return summary("handoff, 2 clients, 2 ms hold", library, count.get(), total, samples);
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

    static Library curator(String hostPort) {
        return name -> {
            CuratorFramework client = CuratorFrameworkFactory.newClient(hostPort, new ExponentialBackoffRetry(100, 3));
            client.start();
            client.blockUntilConnected();
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
