"""The watchdog's deadline scopes behave as ``asyncio.timeout_at`` does, with one timer."""

from __future__ import annotations

import asyncio

import pytest

from orchestration._deadlines import Watchdog, watchdog


def test_a_scope_past_its_deadline_raises_timeout_error_where_it_ends() -> None:
    async def main() -> tuple[bool, float]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        reached = False
        with pytest.raises(TimeoutError):
            async with watchdog().deadline(started + 0.05):
                await asyncio.sleep(5)
                reached = True
        return reached, loop.time() - started

    reached, elapsed = asyncio.run(main())
    assert not reached and 0.04 <= elapsed < 1.0


def test_a_scope_left_in_time_changes_nothing_and_many_share_one_timer() -> None:
    async def one(index: int) -> int:
        loop = asyncio.get_running_loop()
        with watchdog().deadline(loop.time() + 30 + index):
            await asyncio.sleep(0)
        return index

    async def main() -> tuple[list[int], int, int]:
        results = list(await asyncio.gather(*(one(i) for i in range(100))))
        results += [await one(i) for i in range(100, 5000)]
        dog = watchdog()
        return results, len(dog._heap), sum(1 for entry in dog._heap if not entry[2].done)

    results, kept, open_scopes = asyncio.run(main())
    assert results == list(range(5000))
    assert open_scopes == 0
    assert kept < 2100  # finished scopes are compacted away, not kept for the whole run


def test_only_the_tasks_past_their_deadline_are_cut() -> None:
    async def step(delay: float, limit: float) -> str:
        loop = asyncio.get_running_loop()
        try:
            async with watchdog().deadline(loop.time() + limit):
                await asyncio.sleep(delay)
        except TimeoutError:
            return "timed out"
        return "done"

    async def main() -> list[str]:
        return list(await asyncio.gather(step(0.01, 0.2), step(1.0, 0.05), step(0.02, 0.3),
                                         step(1.0, 0.1)))

    assert asyncio.run(main()) == ["done", "timed out", "done", "timed out"]


def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    async def main() -> str:
        loop = asyncio.get_running_loop()

        async def work() -> None:
            async with watchdog().deadline(loop.time() + 10):
                await asyncio.sleep(5)

        task = loop.create_task(work())
        await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return "cancelled"
        return "finished"

    assert asyncio.run(main()) == "cancelled"


def test_a_deadline_already_past_cuts_at_the_first_wait_and_nested_scopes_answer_for_their_own() -> None:
    async def main() -> tuple[str, str]:
        loop = asyncio.get_running_loop()
        dog = Watchdog(loop)
        try:
            with dog.deadline(loop.time() - 1):
                await asyncio.sleep(1)
            first = "done"
        except TimeoutError:
            first = "timed out"
        outer_cut = "no"
        try:
            with dog.deadline(loop.time() + 5):
                try:
                    with dog.deadline(loop.time() + 0.02):
                        await asyncio.sleep(1)
                except TimeoutError:
                    outer_cut = "inner"
                await asyncio.sleep(0.01)
        except TimeoutError:
            outer_cut = "outer"
        return first, outer_cut

    assert asyncio.run(main()) == ("timed out", "inner")


def test_outside_a_task_a_scope_refuses_to_start() -> None:
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(RuntimeError):
            Watchdog(loop).deadline(0).__enter__()
    finally:
        loop.close()


def test_a_scope_left_in_time_does_not_keep_its_task_alive() -> None:
    """A scope stays in the heap until its time; the finished task (and all its frames
    hold: a step's params and output) must be freed long before then."""
    import gc
    import weakref

    async def step() -> None:
        with watchdog().deadline(asyncio.get_running_loop().time() + 3600):
            await asyncio.sleep(0)

    async def main() -> bool:
        task = asyncio.get_running_loop().create_task(step())
        await task
        ref = weakref.ref(task)
        del task
        for _ in range(3):  # let the loop drop its own callbacks that hold the task
            await asyncio.sleep(0)
        gc.collect()
        return ref() is None

    assert asyncio.run(main())
