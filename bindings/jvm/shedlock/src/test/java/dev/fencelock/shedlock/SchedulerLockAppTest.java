package dev.fencelock.shedlock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.fencelock.Backends;
import dev.fencelock.Locker;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import net.javacrumbs.shedlock.core.LockProvider;
import net.javacrumbs.shedlock.spring.annotation.EnableSchedulerLock;
import net.javacrumbs.shedlock.spring.annotation.SchedulerLock;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.context.annotation.AnnotationConfigApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.DependsOn;
import org.springframework.scheduling.annotation.EnableScheduling;
import org.springframework.scheduling.annotation.Scheduled;
import org.springframework.scheduling.concurrent.ThreadPoolTaskScheduler;

/**
 * A small Spring application with one {@code @Scheduled} job under {@code @SchedulerLock}, started
 * twice (two instances of one service, each with its own Locker on one SQLite database): the job
 * never runs on both at once, and lockAtLeastFor spaces its runs out across the instances.
 */
class SchedulerLockAppTest {
    static final AtomicInteger RUNNING = new AtomicInteger();
    static final AtomicInteger MOST_AT_ONCE = new AtomicInteger();
    static final AtomicInteger RUNS = new AtomicInteger();
    static final Set<Long> TOKENS = ConcurrentHashMap.newKeySet();
    static final AtomicInteger RAN_WITHOUT_LOCK = new AtomicInteger();

    @Configuration
    @EnableScheduling
    @EnableSchedulerLock(defaultLockAtMostFor = "PT10S")
    static class App {
        @Bean(destroyMethod = "close")
        Locker locker() throws InterruptedException {
            return Locker.connect(Backends.INSTANCE.url("sqlite"));
        }

        @Bean
        LockProvider lockProvider(Locker locker) {
            return new FencelockLockProvider(locker);
        }

        @Bean
        ReportJob reportJob() {
            return new ReportJob();
        }
    }

    /**
     * The same application with its scheduler stopped before its Locker closes, as the module's
     * README says to: the scheduler depends on the Locker (so it is destroyed first) and waits for
     * a running job to end.
     */
    @Configuration
    @EnableScheduling
    @EnableSchedulerLock(defaultLockAtMostFor = "PT10S")
    static class OrderlyApp extends App {
        @Bean
        @DependsOn("locker")
        ThreadPoolTaskScheduler taskScheduler() {
            ThreadPoolTaskScheduler scheduler = new ThreadPoolTaskScheduler();
            scheduler.setWaitForTasksToCompleteOnShutdown(true);
            scheduler.setAwaitTerminationSeconds(30);
            return scheduler;
        }
    }

    static class ReportJob {
        /** Every 20 ms on each instance, but at most once per 300 ms fleet-wide. */
        @Scheduled(fixedDelay = 20)
        @SchedulerLock(name = "fencelock-shedlock-report", lockAtLeastFor = "PT0.3S")
        public void report() throws InterruptedException {
            int now = RUNNING.incrementAndGet();
            MOST_AT_ONCE.accumulateAndGet(now, Math::max);
            FencelockLockProvider.currentLease().ifPresent(lease -> TOKENS.add(lease.getToken()));
            RUNS.incrementAndGet();
            try {
                Thread.sleep(50);
            } finally {
                if (FencelockLockProvider.currentLease().isEmpty()) {
                    // Its Locker was closed (or the lease lost) while it ran.
                    RAN_WITHOUT_LOCK.incrementAndGet();
                }
                RUNNING.decrementAndGet();
            }
        }
    }

    /**
     * The applications' Lockers are beans on SQLite: a skip thrown while Spring makes them would
     * come out as an error, so the skip comes first.
     */
    @BeforeEach
    void onlyWhereSqliteIsSelected() {
        Backends.assumeSelected("sqlite");
    }

    @Test
    void theJobRunsOnOneInstanceAtATime() throws Exception {
        RUNNING.set(0);
        MOST_AT_ONCE.set(0);
        RUNS.set(0);
        TOKENS.clear();
        long started = System.nanoTime();
        int mostAtOnce;
        int runs;
        int tokens;
        double seconds;
        try (AnnotationConfigApplicationContext first = new AnnotationConfigApplicationContext(App.class);
                AnnotationConfigApplicationContext second = new AnnotationConfigApplicationContext(App.class)) {
            long deadline = System.nanoTime() + 1_000_000L * Backends.MARGIN_MS;
            while (RUNS.get() < 3 && System.nanoTime() < deadline) {
                Thread.sleep(20);
            }
            // Read while both instances are up. Closing a context closes its Locker bean before
            // Spring's scheduling infrastructure interrupts a running job (beans are destroyed in
            // reverse order of registration), so a job may still be running there while its
            // released lock already lets the other instance start one.
            mostAtOnce = MOST_AT_ONCE.get();
            runs = RUNS.get();
            tokens = TOKENS.size();
            seconds = (System.nanoTime() - started) / 1e9;
            assertTrue(runs >= 3, "the job ran " + runs + " times");
            assertNotSame(first.getBean(Locker.class), second.getBean(Locker.class), "two instances, two Lockers");
        }
        assertEquals(1, mostAtOnce, "the job ran on both instances at once");
        // Each run adds its token before it counts itself: read in that order, a token shared by
        // two runs or a run without a lease leaves fewer tokens than runs.
        assertTrue(tokens >= runs, runs + " runs, " + tokens + " tokens: each run holds a lease with its own token");
        // Without lockAtLeastFor it would run about every 70 ms on each instance.
        assertTrue(
                runs <= seconds / 0.3 + 2, runs + " runs in " + seconds + " s: lockAtLeastFor of 300 ms was not kept");
    }

    /**
     * With the scheduler stopped before the Locker closes, no job runs without its lock, shutdown
     * included: a job still running when the contexts close ends with its lease held, and the
     * other instance never starts one meanwhile. (With Spring's default scheduler, closing the
     * context closes the Locker bean first, releasing a running job's lock.)
     */
    @Test
    void anOrderlyShutdownNeverLetsAJobRunWithoutItsLock() throws Exception {
        RUNNING.set(0);
        MOST_AT_ONCE.set(0);
        RUNS.set(0);
        RAN_WITHOUT_LOCK.set(0);
        try (AnnotationConfigApplicationContext first = new AnnotationConfigApplicationContext(OrderlyApp.class);
                AnnotationConfigApplicationContext second = new AnnotationConfigApplicationContext(OrderlyApp.class)) {
            long deadline = System.nanoTime() + 1_000_000L * Backends.MARGIN_MS;
            while (RUNS.get() < 3 && System.nanoTime() < deadline) {
                Thread.sleep(20);
            }
            assertTrue(RUNS.get() >= 3, "the job ran " + RUNS.get() + " times");
            // Close while a job runs: wait for one to be running.
            while (RUNNING.get() == 0 && System.nanoTime() < deadline) {
                Thread.sleep(1);
            }
        }
        assertEquals(0, RUNNING.get(), "a job still ran after its context closed");
        assertEquals(1, MOST_AT_ONCE.get(), "the job ran on both instances at once, shutdown included");
        assertEquals(0, RAN_WITHOUT_LOCK.get(), "a job ended without its lock");
    }
}
