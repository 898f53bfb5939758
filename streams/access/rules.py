"""Who may see which streams: the members of a stream's project (streams/access/projects.py
says what each role may do), and staff every stream. A stream someone may not see is reported
as not found, so ids of other projects' streams do not leak."""

from streams.access import projects
from streams.models import Stream


def streams_for(user, project=None):
    """The streams `user` may see: of `project` (a Project or id) when given, else of every
    project they belong to (staff: every stream)."""
    return projects.in_project(Stream.objects.all(), user, project)


def may_see(user, project_id):
    """Whether `user` may see a stream of project `project_id` (None: of no project)."""
    return projects.may(user, projects.Action.READ, project_id)
