"""Tracing in Python: `connect(url, tracing=True)` and `Fence.open(..., tracing=True)` make spans
of acquires (waiting included), extends, releases, renewals and fence writes through
OpenTelemetry's Python API, children of the caller's current span (renewals: root spans linked to
their acquire's); and a log record produced during a call is handled in that call's contextvars.
Read back through the SDK's in-memory exporter, on every backend."""

import asyncio
import contextvars
import logging
import time
import uuid
from typing import Any, Callable, List, Sequence

import pytest
from conftest import LONG
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import fencelock

# One provider for the test process, set before any Locker traces.
_exporter = InMemorySpanExporter()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(_exporter))
trace.set_tracer_provider(_provider)
_tracer = trace.get_tracer("fencelock-tests")


def _unique(prefix: str) -> str:
    return f"py-{prefix}-{uuid.uuid4().hex[:12]}"


def _about(span: ReadableSpan, name: str) -> bool:
    attributes = span.attributes or {}
    return name in (attributes.get("fencelock.lock"), attributes.get("fencelock.resource"))


def _spans_of(
    name: str, ready: Callable[[List[ReadableSpan]], bool] = lambda _: True
) -> List[ReadableSpan]:
    # Spans reach OpenTelemetry on fencelock's span thread when their operation ends: polled.
    deadline = time.monotonic() + LONG
    while True:
        spans = [s for s in _exporter.get_finished_spans() if _about(s, name)]
        if ready(spans) or time.monotonic() > deadline:
            return spans
        time.sleep(0.02)


def _named(spans: Sequence[ReadableSpan], name: str) -> List[ReadableSpan]:
    return [s for s in spans if s.name == name]


def _attribute(span: ReadableSpan, key: str) -> Any:
    return (span.attributes or {}).get(key)


_BACKEND_OF_SCHEME = {
    "sqlite": "sqlite",
    "redis": "redis",
    "rediss": "redis",
    "redis+cluster": "redis-cluster",
    "redlock": "redlock",
    "zk": "zookeeper",
    "postgres": "postgres",
    "postgresql": "postgres",
    "mysql": "mysql",
    "mariadb": "mysql",
}


def test_a_lock_life_is_spans_under_the_callers_span(
    any_url: str, any_rival: fencelock.Locker, data_url: str
) -> None:
    name, resource = _unique("spans"), _unique("fence")
    with (
        fencelock.connect(any_url, tracing=True) as locker,
        fencelock.Fence.open(data_url, resource, tracing=True) as fence,
    ):
        with _tracer.start_as_current_span("request") as request:
            lease = locker.acquire(name, ttl=1.5)
            renewed = _spans_of(name, lambda s: len(_named(s, "fencelock.renew")) >= 2)
            assert len(_named(renewed, "fencelock.renew")) >= 2, renewed
            lease.extend()
            fence.fenced_execute(lease, ["CREATE TABLE IF NOT EXISTS t (x)"])
            lease.release()
            with any_rival.lock(name) as newer:
                # Held by another client: a try-once acquire comes back empty.
                assert locker.try_acquire(name) is None
                fence.fenced_execute(newer, [])
                with pytest.raises(fencelock.StaleToken):
                    fence.fenced_execute(lease.token, [])
        request_span = request.get_span_context()

    spans = _spans_of(
        name,
        lambda s: (
            len(_named(s, "fencelock.acquire")) >= 2 and len(_named(s, "fencelock.release")) >= 1
        ),
    )
    acquires = _named(spans, "fencelock.acquire")
    assert [_attribute(s, "fencelock.outcome") for s in acquires] == ["acquired", "timeout"]
    first = acquires[0]
    backend = _attribute(first, "fencelock.backend")
    assert backend == _BACKEND_OF_SCHEME[any_url.split(":", 1)[0]]
    assert _attribute(first, "fencelock.token") == lease.token
    assert _attribute(first, "fencelock.mode") == "exclusive"
    for span in spans:
        if span.name == "fencelock.fence.write":
            continue
        assert _attribute(span, "fencelock.backend") == backend
        if span.name != "fencelock.renew":
            assert span.parent is not None and span.parent.span_id == request_span.span_id, span
            assert span.context is not None and span.context.trace_id == request_span.trace_id
    for renewal in _named(spans, "fencelock.renew"):
        # A root span of its own trace, linked to the acquire that took the lease.
        assert renewal.parent is None
        assert _attribute(renewal, "fencelock.outcome") == "renewed"
        assert [link.context.span_id for link in renewal.links] == [first.context.span_id]
    assert [_attribute(s, "fencelock.outcome") for s in _named(spans, "fencelock.extend")] == [
        "extended"
    ]
    assert [_attribute(s, "fencelock.outcome") for s in _named(spans, "fencelock.release")] == [
        "released"
    ]
    writes = _spans_of(resource, lambda s: len(s) >= 3)
    assert [_attribute(s, "fencelock.outcome") for s in writes] == ["accepted", "accepted", "stale"]
    assert all(_attribute(s, "fencelock.backend") == "sqlite" for s in writes)
    assert all(s.parent is not None and s.parent.span_id == request_span.span_id for s in writes)
    # The stale write's token came bare: only the leases' tokens name their lock.
    assert [_attribute(s, "fencelock.lock") for s in writes] == [name, name, None]


def test_an_awaited_call_is_a_span_under_the_awaiting_tasks_span(url: str) -> None:
    name = _unique("async-spans")

    async def main() -> Any:
        locker = await fencelock.connect_async(url, tracing=True)
        with _tracer.start_as_current_span("task") as task:
            lease = await locker.acquire_async(name)
            await lease.release_async()
        await locker.close_async()
        return task.get_span_context()

    task_span = asyncio.run(main())
    spans = _spans_of(name, lambda s: len(s) >= 2)
    assert sorted(s.name for s in spans) == ["fencelock.acquire", "fencelock.release"]
    assert all(s.parent is not None and s.parent.span_id == task_span.span_id for s in spans)


def test_tracing_is_off_by_default(url: str) -> None:
    name, marker = _unique("untraced"), _unique("traced")
    with fencelock.connect(url) as locker:
        locker.acquire(name).release()
    with fencelock.connect(url, tracing=True) as traced:
        traced.acquire(marker).release()
    # The traced Locker's spans, reported after the untraced one's would have been.
    assert len(_spans_of(marker, lambda s: len(s) >= 2)) == 2
    assert _spans_of(name) == []


def test_tracing_takes_a_boolean(url: str) -> None:
    with pytest.raises(fencelock.InvalidArgument, match="tracing"):
        fencelock.connect(url, tracing="yes")  # type: ignore[arg-type]


request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


class _RequestIds(logging.Handler):
    """Keeps the request id current where each record of fencelock is handled."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: List[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((record.getMessage(), request_id.get()))


def test_a_calls_log_records_are_handled_in_its_context(
    locker: fencelock.Locker, rival: fencelock.Locker
) -> None:
    handler = _RequestIds()
    logger = logging.getLogger("fencelock")
    logger.addHandler(handler)
    try:
        name = _unique("logged")
        lease = locker.acquire(name, auto_renew=False)
        rival.force_release(name)
        request_id.set("request-7")
        # The extend finds the lock gone: the core logs the loss during this call.
        with pytest.raises(fencelock.Lost):
            lease.extend()
        request_id.set("after")
        deadline = time.monotonic() + LONG
        while not any("lease lost" in message for message, _ in handler.seen):
            assert time.monotonic() < deadline, handler.seen
            time.sleep(0.02)
        assert [rid for message, rid in handler.seen if "lease lost" in message] == ["request-7"]
    finally:
        logger.removeHandler(handler)
