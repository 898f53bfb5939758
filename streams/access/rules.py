"""Who may see which streams: the members of a stream's project (streams/access/projects.py
says what each role may do), and staff every stream. A stream someone may not see is reported
as not found, so ids of other projects' streams do not leak."""

from django.db.models import Q

from streams.access import projects
from streams.models import ScoreType, Stream


def streams_for(user, project=None):
    """The streams `user` may see: of `project` (a Project or id) when given, else of every
    project they belong to (staff: every stream)."""
    return projects.in_project(Stream.objects.all(), user, project)


def may_see(user, project_id):
    """Whether `user` may see a stream of project `project_id` (None: of no project)."""
    return projects.may(user, projects.Action.READ, project_id)


def score_types_for(user, project=None):
    """The score types the pages of `project` offer `user`, by name: the instance's, and the
    project's own (an evaluator's: streams/evaluate/); `project` None (staff looking at every
    project): those of every project they may read. Another project's are not named."""
    theirs = projects.in_project(ScoreType.objects.all(), user, project)
    return ScoreType.objects.filter(
        Q(project__isnull=True) | Q(pk__in=theirs.values("pk"))
    ).order_by("name", "pk")
