package dev.fencelock.spring;

import dev.fencelock.ConnectOptions;
import dev.fencelock.Locker;
import dev.fencelock.MetricsRecorder;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.env.Environment;

/**
 * Spring Boot auto-configuration, on when the property {@code fencelock.url} is set: a
 * {@link Locker} bean on that URL (closed with the context), a {@link FencelockMeterBinder} that
 * receives its metrics when Micrometer is on the class path (Boot binds it to the registries), and
 * a {@link FencelockLockRegistry} when Spring Integration is. Each backs off when the application
 * declares its own bean of that type.
 */
@AutoConfiguration
@ConditionalOnProperty(prefix = "fencelock", name = "url")
public class FencelockAutoConfiguration {
    @Bean(destroyMethod = "close")
    @ConditionalOnMissingBean
    public Locker fencelockLocker(Environment environment, ObjectProvider<MetricsRecorder> metrics)
            throws InterruptedException {
        ConnectOptions options =
                ConnectOptions.builder().metricsRecorder(metrics.getIfUnique()).build();
        return Locker.connect(environment.getRequiredProperty("fencelock.url"), options);
    }

    /** Micrometer on the class path: the Locker's measurements become meters. */
    @Configuration(proxyBeanMethods = false)
    @ConditionalOnClass(name = "io.micrometer.core.instrument.binder.MeterBinder")
    static class Metrics {
        @Bean
        @ConditionalOnMissingBean
        FencelockMeterBinder fencelockMeterBinder() {
            return new FencelockMeterBinder();
        }
    }

    /** Spring Integration on the class path: a LockRegistry on the Locker. */
    @Configuration(proxyBeanMethods = false)
    @ConditionalOnClass(name = "org.springframework.integration.support.locks.LockRegistry")
    static class Integration {
        @Bean
        @ConditionalOnMissingBean
        FencelockLockRegistry fencelockLockRegistry(Locker locker) {
            return new FencelockLockRegistry(locker);
        }
    }
}
