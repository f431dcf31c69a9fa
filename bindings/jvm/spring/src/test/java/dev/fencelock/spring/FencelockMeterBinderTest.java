package dev.fencelock.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.fencelock.Backends;
import dev.fencelock.ConnectOptions;
import dev.fencelock.LockInvalidArgumentException;
import dev.fencelock.Locker;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** fencelock's metrics arrive in a Micrometer registry through the MeterBinder. */
class FencelockMeterBinderTest {
    @Test
    void acquisitionsAndTheirDurationsShowInTheRegistry() throws Exception {
        SimpleMeterRegistry registry = new SimpleMeterRegistry();
        FencelockMeterBinder metrics = new FencelockMeterBinder();
        metrics.bindTo(registry);
        ConnectOptions options =
                ConnectOptions.builder().metricsRecorder(metrics).build();
        try (Locker locker = Locker.connect(Backends.INSTANCE.url("sqlite"), options)) {
            String name = Backends.INSTANCE.uniqueName("micrometer");
            for (int i = 0; i < 3; i++) {
                locker.runLocked(name, () -> {});
            }
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(Backends.MARGIN_MS);
            Counter acquisitions = null;
            while (System.nanoTime() < deadline) {
                acquisitions = registry.find("fencelock.acquisitions")
                        .tag("backend", "sqlite")
                        .counter();
                if (acquisitions != null && acquisitions.count() >= 3) {
                    break;
                }
                Thread.sleep(20);
            }
            assertTrue(acquisitions != null && acquisitions.count() >= 3, "acquisitions counted: " + acquisitions);
            Timer duration = registry.find("fencelock.acquire.duration").timer();
            assertTrue(duration != null && duration.count() >= 3, "acquire durations timed: " + duration);
            assertTrue(duration.totalTime(TimeUnit.NANOSECONDS) > 0);
            for (Meter meter : registry.getMeters()) {
                assertTrue(
                        meter.getId().getName().startsWith("fencelock."),
                        meter.getId().getName());
                assertEquals(
                        "sqlite", meter.getId().getTag("backend"), meter.getId().toString());
            }
        }
    }

    @Test
    void metricsAndARecorderTogetherAreRefused() {
        assertThrows(
                LockInvalidArgumentException.class,
                () -> ConnectOptions.builder()
                        .metrics(true)
                        .metricsRecorder(new FencelockMeterBinder())
                        .build());
    }
}
