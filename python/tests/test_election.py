"""Leader election (issue 12): one leader at a time, terms that grow with every new leader,
observers that see the leader without campaigning, and leadership that ends on resign, on
leaving the block, and at a loss."""

import asyncio
import threading
from typing import List

import pytest
from conftest import LONG, in_another_thread
from test_backends import fresh

import fencelock


def test_leadership_on_every_backend(any_locker: fencelock.Locker) -> None:
    election = fresh("election")
    assert any_locker.leader(election) is None
    with any_locker.leadership(election, ttl=10, holder="reports worker") as leadership:
        assert isinstance(leadership, fencelock.Leadership)
        assert leadership.is_leader and leadership.name == election
        assert leadership.term == leadership.lease.token
        seen = any_locker.leader(election)
        assert seen is not None and seen.term == leadership.term
        assert seen.holder is not None and seen.holder.get("text") == "reports worker"
        # Another candidate (another thread) does not lead meanwhile.
        with pytest.raises(fencelock.Timeout):
            in_another_thread(lambda: any_locker.leadership(election, wait=0.2).__enter__())
    assert not leadership.is_leader
    assert any_locker.leader(election) is None


def test_terms_grow_with_every_leader(locker: fencelock.Locker, rival: fencelock.Locker) -> None:
    terms: List[int] = []

    def candidate(who: fencelock.Locker) -> None:
        for _ in range(3):
            with who.leadership("rotating", wait=LONG) as leadership:
                terms.append(leadership.term)

    threads = [threading.Thread(target=candidate, args=(who,)) for who in (locker, rival)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(LONG)
    assert len(terms) == 6
    assert terms == sorted(terms) and len(set(terms)) == 6


def test_run_as_leader_returns_and_resigns(locker: fencelock.Locker) -> None:
    def lead(leadership: fencelock.Leadership) -> int:
        assert leadership.is_leader
        return leadership.term

    term = locker.run_as_leader("batch", lead, ttl=5)
    assert isinstance(term, int)
    assert locker.leader("batch") is None

    def fail(leadership: fencelock.Leadership) -> None:
        raise KeyError("job failed")

    with pytest.raises(KeyError, match="job failed"):
        locker.run_as_leader("batch", fail)
    assert locker.leader("batch") is None, "an exception in the function still resigns"
    with pytest.raises(fencelock.InvalidArgument, match="callable"):
        locker.run_as_leader("batch", 42)  # type: ignore[arg-type]


def test_a_lost_leadership_fires_and_is_reported(locker: fencelock.Locker) -> None:
    with pytest.raises(fencelock.Lost):
        with locker.leadership("fragile", ttl=0.5, auto_renew=False) as leadership:
            assert leadership.lost.wait(LONG)
            assert not leadership.is_leader
            with pytest.raises(fencelock.Lost):
                leadership.raise_if_lost()


def test_resign_then_leaving_is_quiet(locker: fencelock.Locker, rival: fencelock.Locker) -> None:
    with locker.leadership("handover") as leadership:
        leadership.resign()
        with pytest.raises(fencelock.NotHeld):
            leadership.resign()
        with rival.leadership("handover", wait=LONG) as successor:
            assert successor.term > leadership.term


def test_leadership_in_asyncio(locker: fencelock.Locker) -> None:
    async def main() -> None:
        async with locker.leadership("async-election") as leadership:
            seen = await locker.leader_async("async-election")
            assert seen is not None and seen.term == leadership.term
        assert await locker.leader_async("async-election") is None
        async with locker.leadership("async-election") as again:
            await again.resign_async()
            assert again.term > leadership.term

    asyncio.run(main())


def test_leadership_takes_no_reentrant_option(locker: fencelock.Locker) -> None:
    with pytest.raises(fencelock.InvalidArgument, match="reentrant"):
        locker.leadership("x", reentrant=True)  # type: ignore[call-arg]
