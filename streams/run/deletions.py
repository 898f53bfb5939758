"""Deleting projects in the background (docs/teams.md, "Members"): a project its owner deleted
is marked at once (streams/access/members.py `delete`) and this job deletes its streams in
batches, then it. Every long-lived process runs it; a project is claimed by one process at a
time (`members.delete_marked`), so two never subtract the same batch from the analytics."""

import logging

from streams.access import members
from streams.run import periodic

log = logging.getLogger(__name__)

EVERY_S = 5.0


@periodic.job("project deletions", EVERY_S)
def delete_marked_projects():
    done = members.delete_marked()
    for pk, n in done.items():
        log.info("project %s: %d streams deleted in this run", pk, n)
    return done
