package dev.fencelock.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.fencelock.Backends;
import dev.fencelock.Locker;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Lock;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.integration.support.locks.LockRegistry;

/** The Spring Boot auto-configuration: beans from fencelock.url, none without it. */
class FencelockAutoConfigurationTest {
    private final ApplicationContextRunner runner =
            new ApplicationContextRunner().withConfiguration(AutoConfigurations.of(FencelockAutoConfiguration.class));

    @Test
    void aLockerARegistryAndMetricsFromTheUrl() {
        runner.withPropertyValues("fencelock.url=" + Backends.INSTANCE.url("sqlite"))
                .run(context -> {
                    Locker locker = context.getBean(Locker.class);
                    assertTrue(locker.getUrl().startsWith("sqlite://"), locker.getUrl());
                    SimpleMeterRegistry registry = new SimpleMeterRegistry();
                    context.getBean(FencelockMeterBinder.class).bindTo(registry);

                    Lock lock = context.getBean(LockRegistry.class).obtain(Backends.INSTANCE.uniqueName("boot"));
                    assertTrue(lock.tryLock(), "the registry's lock");
                    lock.unlock();

                    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(Backends.MARGIN_MS);
                    Counter acquisitions = null;
                    while (System.nanoTime() < deadline && (acquisitions == null || acquisitions.count() < 1)) {
                        acquisitions = registry.find("fencelock.acquisitions").counter();
                        Thread.sleep(20);
                    }
                    assertTrue(acquisitions != null && acquisitions.count() >= 1, "the Locker records into the binder");
                });
    }

    @Test
    void nothingWithoutTheUrl() {
        runner.run(context -> {
            assertFalse(context.containsBean("fencelockLocker"), "a Locker without fencelock.url");
            assertEquals(0, context.getBeanNamesForType(LockRegistry.class).length);
        });
    }
}
