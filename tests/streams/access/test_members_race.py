"""A project always has an owner, under concurrent changes too (streams/access/members.py): two
owners demoting each other at the same moment leave one. On PostgreSQL (READ COMMITTED) two
transactions that each write their own row and count the owners both see the other still an
owner; the lock on the project's row makes the second wait for the first and count after it.

Both transactions are held between their write and their count (a barrier, given up after a
short wait), which is where an unlocked pair interleaves. SQLite has one writer at a time, so
the race is PostgreSQL's: this runs in the CI's second tier (DATABASE_URL)."""

import threading

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection

from streams.access import members
from streams.access.members import Refused
from streams.models import Membership

pytestmark = [
    pytest.mark.scale,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        "postgresql" not in settings.DATABASES["default"]["ENGINE"], reason="needs PostgreSQL"
    ),
]


def test_two_owners_demoting_each_other_at_once_leave_one(monkeypatch):
    make = get_user_model().objects.create_user
    ann, ben = make("ann"), make("ben")
    project = members.create(ann, "Race")
    members.add(ann, project, ben, "owner")

    barrier = threading.Barrier(2)
    counting = members._owner_left

    def held(project):
        try:
            barrier.wait(timeout=2)  # both written, neither counted (unless one waits on a lock)
        except threading.BrokenBarrierError:
            pass
        counting(project)

    monkeypatch.setattr(members, "_owner_left", held)
    outcomes = []

    def demote(actor, other):
        try:
            members.change_role(actor, project, other, "member")
            outcomes.append("demoted")
        except Refused:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=demote, args=pair) for pair in ((ann, ben), (ben, ann))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes) == ["demoted", "refused"]
    assert Membership.objects.filter(project=project, role="owner").count() == 1
