"""What every language must agree on (docs/design.md §9.3), compared with the core's own lists.

The core's error codes, event kinds and option table come from the native module at run time
(`fencelock._native._contract()`), never from a copy here, so a code, kind or option the core
gains fails these tests until the Python package has it too.
"""

import asyncio
import inspect
from pathlib import Path
from typing import Any, Callable, Dict, List, Set

import pytest

import fencelock
from fencelock import _native

CONTRACT: Dict[str, Any] = _native._contract()
OPTIONS: Dict[str, Dict[str, Any]] = {spec["name"]: spec for spec in CONTRACT["options"]}

#: The Python functions of each core operation; their keyword-only parameters are the options.
FUNCTIONS: Dict[str, List[Callable[..., Any]]] = {
    "connect": [fencelock.connect, fencelock.connect_async],
    "acquire": [
        fencelock.Locker.lock,
        fencelock.Locker.semaphore,
        fencelock.Locker.read_lock,
        fencelock.Locker.write_lock,
        fencelock.Locker.acquire,
        fencelock.Locker.acquire_async,
    ],
    "try_acquire": [fencelock.Locker.try_acquire, fencelock.Locker.try_acquire_async],
    "campaign": [fencelock.Locker.leadership, fencelock.Locker.run_as_leader],
    "open_fence": [fencelock.Fence.open, fencelock.Fence.open_async],
}

#: Options only Python offers, per operation, each with its reason. None today: every option
#: Python takes is the core's.
PYTHON_ONLY: Dict[str, Dict[str, str]] = {operation: {} for operation in FUNCTIONS}


def offered(operation: str) -> Set[str]:
    """The core's options for `operation` that a binding offers (not those it sets itself)."""
    return {
        spec["name"]
        for spec in CONTRACT["options"]
        if operation in spec["operations"] and not spec["set_by_binding"]
    }


def keywords(function: Callable[..., Any]) -> Dict[str, inspect.Parameter]:
    return {
        p.name: p
        for p in inspect.signature(function).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def test_the_lists_are_the_cores() -> None:
    # Sanity of what the native module hands over: the same lists design.md §6.1 and §7.1 name.
    assert CONTRACT["error_codes"][0] == "TIMEOUT" and "NOT_HELD" in CONTRACT["error_codes"]
    assert "renewal_retried" in CONTRACT["event_kinds"]
    assert set(FUNCTIONS) == set(CONTRACT["operations"]), "map each core operation to functions"


@pytest.mark.parametrize("code", CONTRACT["error_codes"])
def test_every_core_error_code_raises_a_class_of_its_own(code: str) -> None:
    exception = _native._exception_for_code(code)
    cls = type(exception)
    assert isinstance(exception, fencelock.LockError)
    assert exception.code == code and getattr(cls, "code", None) == code
    assert cls is not fencelock.LockError, f"{code} has no class: add one to fencelock/_errors.py"
    assert cls.__name__ in fencelock.__all__ and getattr(fencelock, cls.__name__) is cls


def test_the_public_exception_classes_are_the_core_codes() -> None:
    public = [
        value
        for value in (getattr(fencelock, name) for name in fencelock.__all__)
        if isinstance(value, type)
        and issubclass(value, fencelock.LockError)
        and value is not fencelock.LockError
    ]
    codes = [cls.code for cls in public]
    assert sorted(codes) == sorted(CONTRACT["error_codes"])
    raised = {type(_native._exception_for_code(code)) for code in CONTRACT["error_codes"]}
    assert raised == set(public)


def test_every_core_event_kind_can_be_listened_to(locker: fencelock.Locker) -> None:
    subscription = locker.on_event(lambda event: None, kinds=CONTRACT["event_kinds"])
    subscription.close()
    for kind in CONTRACT["event_kinds"]:
        locker.on_event(lambda event: None, kinds=kind).close()
    with pytest.raises(fencelock.InvalidArgument, match="unknown event kind"):
        locker.on_event(lambda event: None, kinds=["not_a_kind"])


@pytest.mark.parametrize("kind", CONTRACT["event_kinds"])
def test_every_core_event_kind_is_documented(kind: str) -> None:
    # Where a user reads which kinds there are: the package's docstring, `on_event`'s and
    # `LockEvent.kind`'s (help() and the IDE show them; the stub types kind as a str).
    for where, doc in [
        ("fencelock", fencelock.__doc__),
        ("Locker.on_event", fencelock.Locker.on_event.__doc__),
        ("LockEvent.kind", fencelock.LockEvent.kind.__doc__),
    ]:
        assert doc and kind in doc, f"{where}'s docstring does not name {kind!r}"


@pytest.mark.parametrize("operation", sorted(FUNCTIONS))
def test_keyword_parameters_are_the_cores_options(operation: str) -> None:
    expected = offered(operation) | set(PYTHON_ONLY[operation])
    for function in FUNCTIONS[operation]:
        assert set(keywords(function)) == expected, function.__qualname__


def _seconds(default: str) -> float:
    if default.endswith("ms"):
        return float(default[:-2]) / 1000
    assert default.endswith("s"), default
    return float(default[:-1])


@pytest.mark.parametrize("operation", sorted(FUNCTIONS))
def test_signature_defaults_are_the_cores(operation: str) -> None:
    for function in FUNCTIONS[operation]:
        for name, parameter in keywords(function).items():
            if name not in OPTIONS:
                continue
            spec, shown = OPTIONS[name], parameter.default
            where = f"{function.__qualname__}({name}={shown!r}), core default {spec['default']}"
            if spec["kind"] == "flag":
                assert shown is (spec["default"] == "true"), where
            elif spec["default"] in ("none", "forever"):
                assert shown is None, where
            elif spec["kind"] == "duration":
                # None stands for the core's default; a number must be that default.
                assert shown is None or shown == _seconds(spec["default"]), where
            else:
                assert shown is None or shown == spec["default"], where


# ---- the same, by calling: each option is taken, and the core's others are refused ----

SAMPLES = {"duration": 5, "flag": False, "text": "contract"}


def _call(
    operation: str, function: Callable[..., Any], url: str, data_url: str, name: str, **kw: Any
) -> None:
    """Calls `function` as a user would, with the options `kw`, and undoes what it did."""
    method = function.__name__
    if operation == "connect":
        if method == "connect_async":

            async def connect_and_close() -> None:
                locker = await fencelock.connect_async(url, **kw)
                await locker.close_async()

            asyncio.run(connect_and_close())
        else:
            fencelock.connect(url, **kw).close()
        return
    if operation == "open_fence":
        if method == "open_async":

            async def open_fence() -> fencelock.Fence:
                return await fencelock.Fence.open_async(data_url, "contract", **kw)

            fence = asyncio.run(open_fence())
        else:
            fence = fencelock.Fence.open(data_url, "contract", **kw)
        fence.close()
        return
    with fencelock.connect(url) as locker:
        if method in ("lock", "read_lock", "write_lock", "leadership"):
            with getattr(locker, method)(name, **kw):
                pass
        elif method == "semaphore":
            with locker.semaphore(name, 2, **kw):
                pass
        elif method == "run_as_leader":
            locker.run_as_leader(name, lambda leadership: leadership.term, **kw)
        elif method.endswith("_async"):

            async def acquire_and_release() -> None:
                lease = await getattr(locker, method)(name, **kw)
                assert lease is not None
                await lease.release_async()

            asyncio.run(acquire_and_release())
        else:
            lease = getattr(locker, method)(name, **kw)
            assert lease is not None
            lease.release()


@pytest.mark.parametrize("operation", sorted(FUNCTIONS))
def test_each_option_is_taken_and_the_cores_others_refused(
    operation: str, url: str, tmp_path: Path
) -> None:
    data_url = f"sqlite://{tmp_path / 'data.db'}"
    takes = offered(operation) | set(PYTHON_ONLY[operation])
    every = {name for name, spec in OPTIONS.items() if not spec["set_by_binding"]}
    for function in FUNCTIONS[operation]:
        for option in sorted(every):
            name = f"contract-{function.__name__}-{option}"
            given = {option: SAMPLES[OPTIONS[option]["kind"]]}
            if option in takes:
                _call(operation, function, url, data_url, name, **given)
            else:
                with pytest.raises(fencelock.InvalidArgument, match=option):
                    _call(operation, function, url, data_url, name, **given)
