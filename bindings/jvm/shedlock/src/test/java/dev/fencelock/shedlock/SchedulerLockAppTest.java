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
import org.junit.jupiter.api.Test;
import org.springframework.context.annotation.AnnotationConfigApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.scheduling.annotation.EnableScheduling;
import org.springframework.scheduling.annotation.Scheduled;

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

    static class ReportJob {
        /** Every 20 ms on each instance, but at most once per 300 ms fleet-wide. */
        @Scheduled(fixedDelay = 20)
        @SchedulerLock(name = "fencelock-shedlock-report", lockAtLeastFor = "PT0.3S")
        public void report() throws InterruptedException {
            int now = RUNNING.incrementAndGet();
            MOST_AT_ONCE.accumulateAndGet(now, Math::max);
            FencelockLockProvider.currentLease().ifPresent(lease -> TOKENS.add(lease.getToken()));
            RUNS.incrementAndGet();
            Thread.sleep(50);
            RUNNING.decrementAndGet();
        }
    }

    @Test
    void theJobRunsOnOneInstanceAtATime() throws Exception {
        long started = System.nanoTime();
        try (AnnotationConfigApplicationContext first = new AnnotationConfigApplicationContext(App.class);
                AnnotationConfigApplicationContext second = new AnnotationConfigApplicationContext(App.class)) {
            long deadline = System.nanoTime() + 1_000_000L * Backends.MARGIN_MS;
            while (RUNS.get() < 3 && System.nanoTime() < deadline) {
                Thread.sleep(20);
            }
            assertTrue(RUNS.get() >= 3, "the job ran " + RUNS.get() + " times");
            assertNotSame(first.getBean(Locker.class), second.getBean(Locker.class), "two instances, two Lockers");
        }
        double seconds = (System.nanoTime() - started) / 1e9;
        assertEquals(1, MOST_AT_ONCE.get(), "the job ran on both instances at once");
        assertEquals(RUNS.get(), TOKENS.size(), "each run held a lease of its own, with its own token");
        // Without lockAtLeastFor it would run about every 70 ms on each instance.
        assertTrue(
                RUNS.get() <= seconds / 0.3 + 2,
                RUNS.get() + " runs in " + seconds + " s: lockAtLeastFor of 300 ms was not kept");
    }
}
