"""Metrics (issue 13) in Python: `connect(url, metrics=True)` records the core's instruments into
OpenTelemetry's Python API, so they reach the provider and exporter the application set up. Read
back here through the SDK's in-memory reader, on SQLite."""

import gc
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Tuple

import pytest
from conftest import LONG
from opentelemetry import metrics as otel_metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import fencelock

# One provider for the test process, set before any Locker with metrics connects.
_reader = InMemoryMetricReader()
otel_metrics.set_meter_provider(MeterProvider(metric_readers=[_reader]))

Key = Tuple[str, Tuple[Tuple[str, str], ...]]


def _snapshot() -> Dict[Key, float]:
    """(instrument, sorted attributes) -> counter sum or histogram count."""
    seen: Dict[Key, float] = {}
    data = _reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    attributes = tuple(
                        sorted((str(k), str(v)) for k, v in (point.attributes or {}).items())
                    )
                    value = getattr(point, "count", None)
                    # A histogram has a count; the others a value (getattr: mypy sees the
                    # union of point types, where a histogram's has no value).
                    seen[(metric.name, attributes)] = float(
                        getattr(point, "value")  # noqa: B009
                        if value is None
                        else value
                    )
    return seen


def _wait_for(key: Key, at_least: float) -> Dict[Key, float]:
    # Measurements reach OpenTelemetry on fencelock's metrics thread: soon, not at once.
    deadline = time.monotonic() + LONG
    while True:
        seen = _snapshot()
        if seen.get(key, 0) >= at_least:
            return seen
        assert time.monotonic() < deadline, f"{key} never reached {at_least}: {seen}"
        time.sleep(0.05)


def test_a_lock_life_shows_in_the_hosts_opentelemetry(url: str) -> None:
    backend = (("backend", "sqlite"),)
    with fencelock.connect(url, metrics=True) as locker:
        for _ in range(3):
            with locker.lock("py-metrics", ttl=5):
                pass
        lease = locker.acquire("py-metrics-lost", ttl=0.6)
        locker.force_release("py-metrics-lost")
        assert lease.lost.wait(LONG)
        seen = _wait_for(("fencelock.losses", backend + (("reason", "taken_over"),)), 1)
        seen = _wait_for(
            ("fencelock.lease.hold", (("backend", "sqlite"), ("outcome", "released"))), 3
        )
    assert seen[("fencelock.acquisitions", backend)] >= 4
    assert seen[("fencelock.acquire.duration", backend)] >= 4
    assert seen[("fencelock.acquire.wait", backend)] >= 4
    assert all(attributes and attributes[0] == ("backend", "sqlite") for _, attributes in seen)


def _metrics_threads() -> int:
    """How many threads of this process deliver measurements (Linux: their names in /proc)."""
    names = []
    for task in Path("/proc/self/task").iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except FileNotFoundError:  # ended meanwhile
            pass
    # The name core/src/metrics.rs's sinks give their thread, as Linux keeps it (15 bytes).
    return names.count("fencelock-metrics"[:15])


def _flushed() -> Dict[Key, float]:
    """The measurements once every sink delivered what it queued. A Locker's sink queues them for
    a thread of its own, which delivers what is queued and ends once the Locker is gone: with no
    such thread left, nothing is on its way (the OpenTelemetry SDK records synchronously)."""
    gc.collect()
    deadline = time.monotonic() + LONG
    while _metrics_threads():
        assert time.monotonic() < deadline, "a metrics thread outlived its Locker"
        time.sleep(0.02)
    return _snapshot()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
def test_metrics_off_by_default_and_bad_values_are_typed_errors(url: str) -> None:
    acquisitions = ("fencelock.acquisitions", (("backend", "sqlite"),))
    before = _flushed().get(acquisitions, 0)
    # The flush is enough to see a measurement: one Locker with metrics, gone, is counted at once.
    with fencelock.connect(url, metrics=True) as measured:
        with measured.lock("py-metrics-on", ttl=5):
            pass
    del measured
    counted = _flushed().get(acquisitions, 0)
    assert counted == before + 1, (before, counted)
    with fencelock.connect(url) as locker:
        with locker.lock("py-metrics-off", ttl=5):
            pass
        assert _metrics_threads() == 0, "a Locker without metrics=True has a metrics sink"
    del locker
    assert _flushed().get(acquisitions, 0) == counted, (
        "a Locker without metrics=True recorded metrics"
    )
    with pytest.raises(fencelock.InvalidArgument, match="metrics"):
        fencelock.connect(url, metrics="yes")  # type: ignore[arg-type]
    with pytest.raises(fencelock.InvalidArgument, match="metrics"):
        fencelock.Fence.open(url, "resource", metrics=True)  # type: ignore[call-arg]


def test_metrics_without_the_opentelemetry_api_is_a_clear_error(url: str) -> None:
    script = (
        "import sys; sys.modules['opentelemetry'] = None; sys.modules['opentelemetry.metrics'] = None\n"
        "import fencelock\n"
        "try:\n"
        f"    fencelock.connect({url!r}, metrics=True)\n"
        "except fencelock.InvalidArgument as e:\n"
        "    print('InvalidArgument:', e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=LONG
    )
    assert out.returncode == 0, out.stderr
    assert "InvalidArgument:" in out.stdout and "pip install opentelemetry-api" in out.stdout, (
        out.stdout
    )
