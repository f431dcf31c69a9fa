package dev.fencelock.spring;

import dev.fencelock.Measurement;
import dev.fencelock.MetricInstrument;
import dev.fencelock.MetricsRecorder;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.binder.MeterBinder;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * fencelock's metrics in Micrometer: a {@link MeterBinder} (Spring Boot binds every such bean to
 * its registries) that is also the Locker's {@link MetricsRecorder}.
 *
 * <pre>{@code
 * FencelockMeterBinder metrics = new FencelockMeterBinder();
 * Locker locker = Locker.connect(url, ConnectOptions.builder().metricsRecorder(metrics).build());
 * // a @Bean of it in Spring Boot, or: metrics.bindTo(registry);
 * }</pre>
 *
 * <p>The instruments keep fencelock's names ({@code fencelock.acquire.duration}, ...; the list is
 * {@link MetricInstrument#all()}): counters as Micrometer counters, the histograms of seconds as
 * timers, with the same tags ({@code backend}, {@code outcome} or {@code reason}). Measurements
 * taken before the first registry is bound are dropped.
 */
public final class FencelockMeterBinder implements MeterBinder, MetricsRecorder {
    private final List<MeterRegistry> registries = new CopyOnWriteArrayList<>();
    private final Map<String, MetricInstrument> instruments = new ConcurrentHashMap<>();

    public FencelockMeterBinder() {
        for (MetricInstrument instrument : MetricInstrument.all()) {
            instruments.put(instrument.getName(), instrument);
        }
    }

    @Override
    public void bindTo(MeterRegistry registry) {
        registries.add(registry);
    }

    /** Called by the Locker on fencelock's metrics thread. */
    @Override
    public void record(List<Measurement> measurements) {
        for (MeterRegistry registry : registries) {
            for (Measurement m : measurements) {
                MetricInstrument instrument = instruments.get(m.getInstrument());
                if (instrument == null) {
                    continue;
                }
                Tags tags = Tags.empty();
                for (Map.Entry<String, String> attribute : m.getAttributes().entrySet()) {
                    tags = tags.and(attribute.getKey(), attribute.getValue());
                }
                if (instrument.isCounter()) {
                    Counter.builder(instrument.getName())
                            .description(instrument.getDescription())
                            .tags(tags)
                            .register(registry)
                            .increment(m.getValue());
                } else {
                    Timer.builder(instrument.getName())
                            .description(instrument.getDescription())
                            .tags(tags)
                            .register(registry)
                            .record(Duration.ofNanos(Math.round(m.getValue() * 1e9)));
                }
            }
        }
    }
}
