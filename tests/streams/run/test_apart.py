"""The process apart (streams/run/apart.py), with a real server: a job marked APART (the alert
rules' evaluation) runs in a child of the Daphne process, not in it, at a lower CPU priority; a
killed child is started again; a server that ends, by a signal or killed outright, leaves no
child behind."""

import glob
import os
import signal

import pytest

from streams.models import Project, RuleState
from tests.conftest import DaphneServer
from tests.support.alerts import rule
from tests.support.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

OVERRIDES = {"ALERT_TICK_S": 0.5, "JOBS_APART": True}  # (test servers run none apart)


def children(pid):
    found = []
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(path) as f:
                found += [int(p) for p in f.read().split()]
        except OSError:
            pass  # (a thread that ended meanwhile)
    return found


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # (a zombie has ended)
    except OSError:
        return False


def nice(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])


def claimer(r):
    """The pid of the process that evaluated `r` last (its state row's RUNNER_ID), or None."""
    state = RuleState.objects.filter(rule=r, evaluated_at__isnull=False).first()
    return int(state.claimed_by.split(":")[1]) if state is not None else None


@pytest.fixture
def watched():
    project = Project.objects.create(name="apart", slug="apart")
    return rule(project, window_s=300, min_streams=1)


def test_an_apart_job_runs_in_a_child_that_is_restarted_and_ends_with_its_parent(
    simulator_process, watched
):
    server = DaphneServer(simulator_process.base_url, overrides=OVERRIDES)
    try:
        first = wait_until(lambda: claimer(watched), 60, 0.1, "the rule's first evaluation")
        assert first != server.proc.pid
        assert first in children(server.proc.pid)

        os.kill(first, signal.SIGKILL)
        RuleState.objects.filter(rule=watched).update(evaluated_at=None)
        second = wait_until(lambda: claimer(watched), 60, 0.1, "an evaluation after the kill")
        assert second != first
        assert second in children(server.proc.pid)
        assert not alive(first)

        # the parent killed outright: nothing stops its child but the child itself
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(10)
        wait_until(lambda: not alive(second), 10, 0.1, "the orphan to end")
    finally:
        server.stop()


def test_a_server_stopped_stops_its_child(simulator_process, watched):
    server = DaphneServer(simulator_process.base_url, overrides=OVERRIDES)
    try:
        child = wait_until(lambda: claimer(watched), 60, 0.1, "the rule's first evaluation")
        assert child in children(server.proc.pid)
        # background work yields the CPU to the server's loop
        assert nice(child) >= nice(server.proc.pid) + 5
    finally:
        server.stop()  # SIGTERM, as a service manager stops it
    wait_until(lambda: not alive(child), 10, 0.1, "the child to end")
