"""Background jobs: due when their period says, one run at a time, failures logged once."""

import asyncio
import logging
import threading

import pytest

from streams.run import periodic


@pytest.fixture
def registry(monkeypatch):
    monkeypatch.setattr(periodic, "_jobs", {})
    # (these jobs touch no database: no connection to replace, and pytest-django refuses one)
    monkeypatch.setattr(periodic, "close_old_connections", lambda: None)
    return periodic


def test_a_job_is_due_at_the_first_tick_then_once_a_period(registry):
    runs = []
    registry.job("count", every_s=60)(lambda: runs.append(1))
    registry.run_due(now=1000.0)
    registry.run_due(now=1059.0)
    assert runs == [1]
    registry.run_due(now=1060.0)
    assert runs == [1, 1]


def test_a_failing_job_is_logged_once_per_kind_until_it_works(registry, caplog):
    state = {"fail": True}

    def flaky():
        if state["fail"]:
            raise RuntimeError("database away")

    registry.job("flaky", every_s=1)(flaky)
    with caplog.at_level(logging.INFO, logger="streams.run.periodic"):
        for now in range(5):
            registry.run_due(now=float(now))
        state["fail"] = False
        registry.run_due(now=10.0)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("flaky failed (RuntimeError" in m for m in messages) == 1, messages
    assert messages[-1] == "flaky works again"


def test_the_loop_runs_jobs_off_its_thread_and_never_one_job_twice_at_once(registry, monkeypatch):
    monkeypatch.setattr(periodic, "TICK_S", 0.01)
    release = threading.Event()
    seen = {"threads": set(), "at_once": 0, "most": 0}
    lock = threading.Lock()

    def slow():
        with lock:
            seen["at_once"] += 1
            seen["most"] = max(seen["most"], seen["at_once"])
            seen["threads"].add(threading.get_ident())
        release.wait(5)
        with lock:
            seen["at_once"] -= 1

    registry.job("slow", every_s=0.01)(slow)

    async def main():
        task = registry.start()
        await asyncio.sleep(0.3)  # thirty ticks while the first run still waits
        release.set()
        await asyncio.sleep(0.05)
        task.cancel()
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert seen["most"] == 1
    assert loop_thread not in seen["threads"]


def test_a_job_that_runs_a_coroutine_runs_it_on_the_process_loop(registry, monkeypatch):
    # (a judge or an experiment's item started from a job must live on the server's loop,
    # where its relay and cancel are, not on a loop of the job's thread)
    from asgiref.sync import async_to_sync

    monkeypatch.setattr(periodic, "TICK_S", 0.01)
    seen = {}

    async def where():
        seen["loop"] = asyncio.get_running_loop()

    registry.job("coro", every_s=60)(lambda: async_to_sync(where)())

    async def main():
        task = registry.start()
        for _ in range(200):
            if "loop" in seen:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        return asyncio.get_running_loop()

    assert asyncio.run(main()) is seen["loop"]


def test_a_job_runs_where_it_says(registry):
    with pytest.raises(ValueError):
        registry.job("nowhere", every_s=1, where="elsewhere")
    registry.job("light", every_s=1)(lambda: None)
    registry.job("heavy", every_s=1, where=periodic.APART)(lambda: None)
    assert [j.name for j in registry.due(now=0.0, where=periodic.ANY)] == ["light"]
    assert [j.name for j in registry.due(now=0.0, where=periodic.APART)] == ["heavy"]
    assert registry.names(periodic.APART) == ["heavy"]


def _run_briefly(registry, monkeypatch, settings, apart_on):
    from streams.run import apart

    settings.STREAMSCOPE = {**settings.STREAMSCOPE, "JOBS_APART": apart_on}
    monkeypatch.setattr(periodic, "TICK_S", 0.01)
    ran, kept = [], []
    registry.job("light", every_s=60)(lambda: ran.append("light"))
    registry.job("heavy", every_s=60, where=periodic.APART)(lambda: ran.append("heavy"))

    async def keep(tick_s):
        kept.append(tick_s)  # (the child's keeper: tests/streams/run/test_apart.py runs it)
        await asyncio.Event().wait()

    monkeypatch.setattr(apart, "keep", keep)

    async def main():
        task = registry.start()
        await asyncio.sleep(0.2)
        task.cancel()

    asyncio.run(main())
    return sorted(ran), kept


def test_apart_jobs_are_left_to_the_child(registry, monkeypatch, settings):
    assert _run_briefly(registry, monkeypatch, settings, True) == (["light"], [0.01])


def test_with_jobs_apart_off_every_job_runs_here(registry, monkeypatch, settings):
    assert _run_briefly(registry, monkeypatch, settings, False) == (["heavy", "light"], [])
