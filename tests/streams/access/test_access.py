"""Who may use what, for every route at once: every URL pattern (found at runtime, recursively)
and every WebSocket route is requested by seven people, the objects' creator last: anonymous, a
member of another project, a viewer, a member and an admin of the objects' project, staff, and
the project's owner who made the objects.

The table below says, per route, which kind of rule it has and which action it does in its
project (`projects.Action`); what each role gets is computed from `projects.ACTIONS` (the least
role per action), so a change of the policy changes the expectations with it. A route without
a row fails the test, and so does a row whose route is gone, or a rule that needs an action
and names none: a new view cannot ship without saying who may use it. Adding a route is one
line in RULES (or WS_RULES); a new URL parameter is one line in PARAMS.

Refusals: pages send anonymous users to the login page (302), the JSON API answers them 401, the
admin sends anyone who is not staff to its own login; a thing of a project one is not in is a
404 (its id must not leak, so never a 403); a member whose role does not allow the action gets
403; a staff-only page is a 403 for other users; a WebSocket handshake is refused. The allowed
users' status is checked too, so the test fails both ways. (Checked once by planting a view
without its project check, `stream_json` reading `Stream.objects`, and one without its role
check, `stream_score`: the walk named both.)

Share links' routes (a `<secret>` in the URL: LINK) are tried with the link of each kind a
visitor may hold: the owner's, a teammate's (another signed-in user with the link: allowed),
staff's; a stranger's wrong secret, an expired and a revoked link, a link to another stream
(404 / refused); signed out (the login page, unless the link is for anyone and the instance
allows it). A route with a secret must have the LINK rule, and only such routes may."""

import datetime as dt
import itertools
import json
import re
from dataclasses import dataclass
from functools import cached_property
from urllib.parse import urlsplit

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.shortcuts import resolve_url
from django.test import AsyncClient, Client
from django.urls import URLResolver, get_resolver, reverse

from dashboard.models import Conversation, SavedView, Turn
from streams import evaluate
from streams.access import invitations, projects, shares
from streams.access.projects import Action
from streams.models import (
    ApiToken,
    Channel,
    Evaluator,
    Event,
    ImportJob,
    Invitation,
    Membership,
    OnlineRule,
    Price,
    Project,
    ScoreType,
    ShareLink,
    Silence,
    Stream,
)
from streams.models import Rule as AlertRule
from streams.notify import channels as notify_channels
from streams.serve.sockets import websocket_urlpatterns
from streams.store import scores
from tests.support import experiments, provider_urls
from tests.support.clients import session, ws

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("_disconnect_communicators"),  # tests/conftest.py: `ws`'s cleanup
]

# Who may use a route: the kind of rule, and the action it does in its project (the least
# role that may is projects.ACTIONS', so the expected outcome of every role is computed).
PUBLIC = "public"  # anyone, signed in or not
# any signed-in user, in the project they work in (request.project): allowed when their role
# there allows the action, else 403 (the walk's four roles work in the objects' project)
PROJECT = "the current project"
# the object's project: its members whose role allows the action (else 403), staff; anyone else
# 404, whatever project they work in (its id must not leak)
OBJECT = "the object's project"
CREATOR = "the object's creator"  # theirs alone: anyone else, staff included, gets 404
CREATOR_OR_STAFF = "the object's creator or staff"
# the object's creator, and whoever may do the action in its project (an admin revoking a
# member's token); anyone else 404 (they are not shown it)
CREATOR_OR_MANAGER = "the object's creator or its project's managers"
# one's own membership of the object's project (leaving it): each member, but the last owner
# (409); anyone else 404
MEMBERSHIP = "one's membership of the object's project"
STAFF = "staff"  # staff only: other users get 403
ADMIN = "admin"  # the Django admin: whoever is not staff goes to the admin's own login
# A share link's pages and socket: any signed-in user holding an open link (signed out too when
# the link is for anyone and the instance allows it); anyone else 404 / refused (streams/store/
# shares.py)
LINK = "link"
# The recording proxy's socket (streams/serve/proxy_socket.py): a program with a token, no
# session: each signed-in user's token of the project they work in (a member's of the walk's
# project, anyone else's of their own), allowed when its user's role there allows the action
# (as PROJECT), refused without one
TOKEN = "a token of the current project"
PER_OBJECT = (OBJECT, CREATOR, CREATOR_OR_STAFF, CREATOR_OR_MANAGER)


@dataclass(frozen=True)
class Rule:
    who: str
    action: Action | None = None  # PROJECT and the per-object kinds: what the route does
    method: str = "GET"  # POSTs send an empty form: refused before it is read, or rejected after
    ok: int = 200  # what an allowed user gets
    api: bool = False  # JSON API: anonymous requests get 401, not a login redirect
    # the query (GET) or body (POST; JSON for the API) from the objects: a route that names
    # its object there instead of in its path (it is then per object)
    data: object = None


READ, RUN, SCORE, COMMENT, SHARE, EVALUATE = (
    Action.READ,
    Action.RUN,
    Action.SCORE,
    Action.COMMENT,
    Action.SHARE,
    Action.EVALUATE,
)
ALERTS = Action.MANAGE_ALERTS

# Keyed by route name (the route itself when it has none); a route with GET and POST has a rule
# for each. A per-object rule applies its object check only to patterns of that name that name
# an object (playground_send has a pattern with a conversation and one without: the current
# project's).
RULES = {
    "login": Rule(PUBLIC),
    # the identity provider's (tests/support/provider_urls.py): off to it, back from it (no
    # state: back to the login page, which says so), and signing out there too
    "oidc_authentication_init": Rule(PUBLIC, ok=302),
    "oidc_authentication_callback": Rule(PUBLIC, ok=302),
    "oidc_logout": Rule(PUBLIC, method="POST", ok=302),
    "logout": Rule(PUBLIC, method="POST", ok=302),
    "favicon.ico": Rule(PUBLIC, ok=301),
    # the language switcher (signed out too: the login page has it) and the scripts' strings
    "set_language": Rule(PUBLIC, method="POST", ok=302),
    "javascript_catalog": Rule(PUBLIC),
    "set_time_zone": Rule(PUBLIC, method="POST", ok=400),  # the empty form: no zone
    "switch_project": Rule(PROJECT, READ, "POST", ok=400),  # the empty form: no project
    "admin:index": Rule(ADMIN),
    "stream_list": Rule(PROJECT, READ),
    "stream_list_csv": Rule(PROJECT, READ),  # the list as CSV: the current project's streams
    "stream_upload": (Rule(PROJECT, RUN), Rule(PROJECT, RUN, "POST", ok=400)),  # an import
    "import_job": Rule(CREATOR, READ),  # an import job's progress: its owner's only
    "import_cancel": Rule(CREATOR, RUN, "POST", ok=302),
    "latency": Rule(PROJECT, READ),
    "routing": Rule(PROJECT, READ),
    "usage": Rule(PROJECT, READ),
    "usage_export": Rule(PROJECT, READ),  # the usage page's per-model table as CSV
    "admin_analytics": Rule(STAFF),
    "audit": Rule(PROJECT, Action.AUDIT),  # a project's admins (staff: every project)
    "stream_detail": Rule(OBJECT, READ),
    "stream_events": Rule(OBJECT, READ),
    "stream_event": Rule(OBJECT, READ),
    "stream_timing": Rule(OBJECT, READ),
    "stream_replay": Rule(OBJECT, READ),
    "stream_sse": Rule(OBJECT, READ),
    "stream_json": Rule(OBJECT, READ),
    "session_detail": Rule(OBJECT, READ),  # the session's streams in the current project
    "stream_compare": Rule(OBJECT, READ),  # both streams must be visible: 404 otherwise
    "stream_compare_with": Rule(OBJECT, READ),
    "stream_compare_pick": Rule(PROJECT, READ),  # the list's two ticked, or how to tick them
    # scoring and commenting (the empty form: no value, no text)
    "stream_score": Rule(OBJECT, SCORE, "POST", ok=400),
    "stream_comment": Rule(OBJECT, COMMENT, "POST", ok=400),
    "stream_score_withdraw": Rule(CREATOR, SCORE, "POST", ok=302),  # one's own score only
    # the project's views (one's own and the shared ones), and saving one (the empty form)
    "saved_views": (Rule(PROJECT, READ), Rule(PROJECT, Action.SAVE_VIEW, "POST", ok=400)),
    "saved_view_delete": Rule(CREATOR, READ, "POST", ok=302),  # one's own, whatever one's role
    "api_streams": (
        Rule(PROJECT, READ, api=True),
        Rule(PROJECT, RUN, "POST", ok=400, api=True, data=lambda o: {}),  # {}: no input
    ),
    "api_stream": Rule(OBJECT, READ, api=True),
    "api_stream_events": Rule(OBJECT, READ, api=True),
    "api_stream_cancel": Rule(OBJECT, RUN, "POST", ok=409, api=True),  # it has ended
    # scores and comments name their stream in the query or body
    "api_scores": (
        Rule(OBJECT, READ, api=True, data=lambda o: {"stream": o.stream.pk}),
        Rule(
            OBJECT,
            SCORE,
            "POST",
            ok=201,
            api=True,
            data=lambda o: {"stream": o.stream.pk, "name": "thumbs", "value": 1, "key": "walk"},
        ),
    ),  # fmt: skip
    "api_comments": Rule(
        OBJECT,
        COMMENT,
        "POST",
        ok=201,
        api=True,
        data=lambda o: {"stream": o.stream.pk, "text": "Hi"},
    ),
    "api_score_types": Rule(PROJECT, READ, api=True),
    "metrics": Rule(STAFF, api=True),  # or METRICS_TOKEN (tests/streams/observe/test_telemetry.py)
    "playground": Rule(PROJECT, READ),  # (a viewer's: without the composer)
    "playground_conversation": Rule(CREATOR, READ),
    "playground_send": Rule(CREATOR, RUN, "POST", ok=400),  # the empty form: no message
    "playground_turn": Rule(CREATOR, READ),
    "playground_retry": Rule(CREATOR, RUN, "POST", ok=409),  # its answer is still streaming
    "playground_delete": Rule(CREATOR, READ, "POST", ok=302),
    "playground_compare": Rule(PROJECT, RUN),  # (the page is its composer)
    "playground_compare_send": Rule(PROJECT, RUN, "POST", ok=400),  # the empty form
    # share links: one's own in the project; making one to a stream (its project's)
    "share_list": Rule(PROJECT, READ),
    "share_create": Rule(
        OBJECT, SHARE, "POST", data=lambda o: {"stream": o.stream.pk, "expires": "7d"}
    ),
    "share_revoke": Rule(CREATOR_OR_STAFF, READ, "POST", ok=302),
    "shared": Rule(LINK),
    "shared_stream": Rule(LINK),
    "shared_stream_events": Rule(LINK),
    "shared_stream_event": Rule(LINK),
    "shared_stream_timing": Rule(LINK),
    "shared_stream_replay": Rule(LINK),
    # the current project's tokens (one's own; an admin's: the project's), and revoking one
    "token_list": Rule(PROJECT, Action.OWN_TOKEN),
    "token_revoke": Rule(CREATOR_OR_MANAGER, Action.MANAGE_TOKENS, "POST", ok=302),
    # notification channels: their names to the project; everything else to its admins
    "channel_list": (
        Rule(PROJECT, READ),
        Rule(PROJECT, Action.MANAGE_CHANNELS, "POST", ok=400),  # the empty form
    ),
    "channel_detail": (
        Rule(OBJECT, Action.MANAGE_CHANNELS),
        Rule(OBJECT, Action.MANAGE_CHANNELS, "POST", ok=400),  # the empty form: no name
    ),
    "channel_test": Rule(OBJECT, Action.MANAGE_CHANNELS, "POST", ok=302),
    "channel_delete": Rule(OBJECT, Action.MANAGE_CHANNELS, "POST", ok=400),  # not confirmed
    "api_channels": (
        Rule(PROJECT, READ, api=True),
        Rule(PROJECT, Action.MANAGE_CHANNELS, "POST", ok=400, api=True, data=lambda o: {}),
    ),
    "api_channel": (
        Rule(OBJECT, Action.MANAGE_CHANNELS, api=True),
        Rule(OBJECT, Action.MANAGE_CHANNELS, "POST", api=True, data=lambda o: {"enabled": False}),
    ),
    "api_channel_delete": Rule(
        OBJECT, Action.MANAGE_CHANNELS, "POST", ok=400, api=True, data=lambda o: {}
    ),  # not confirmed
    "api_channel_test": Rule(OBJECT, Action.MANAGE_CHANNELS, "POST", ok=202, api=True),
    "api_channel_deliveries": Rule(OBJECT, Action.MANAGE_CHANNELS, api=True),
    # projects (dashboard/views/projects.py): one's list and making one; a project's pages
    "project_list": Rule(PROJECT, READ),
    "project_create": Rule(PROJECT, READ, "POST", ok=400),  # the empty form: no name
    "project_members": Rule(OBJECT, READ),
    "project_member_add": Rule(OBJECT, Action.MANAGE_MEMBERS, "POST", ok=400),
    "project_member_role": Rule(OBJECT, Action.MANAGE_MEMBERS, "POST", ok=400),  # no role
    # removing its owner, the last one: only an owner may touch an owner, and not the last
    "project_member_remove": Rule(OBJECT, Action.MANAGE_OWNERS, "POST", ok=409),
    "project_leave": Rule(MEMBERSHIP, method="POST", ok=302),
    "project_invite": Rule(OBJECT, Action.MANAGE_MEMBERS, "POST", ok=400),  # the empty form
    "project_invitation_revoke": Rule(OBJECT, Action.MANAGE_MEMBERS, "POST", ok=302),
    "project_settings": Rule(OBJECT, Action.MANAGE_RETENTION),  # (owners: rename, delete)
    "project_configure": Rule(OBJECT, Action.MANAGE_RETENTION, "POST", ok=400),  # no currency
    "project_rename": Rule(OBJECT, Action.RENAME_PROJECT, "POST", ok=400),
    "project_delete": Rule(OBJECT, Action.DELETE_PROJECT, "POST", ok=400),  # no confirmation
    # a project's score types and prices: everyone in it reads them; its admins change its own
    "project_score_types": Rule(OBJECT, READ),
    "project_score_type_add": Rule(OBJECT, Action.MANAGE_SCORE_TYPES, "POST", ok=400),  # no name
    "project_score_type_edit": Rule(OBJECT, Action.MANAGE_SCORE_TYPES, "POST", ok=400),
    "project_score_type_delete": Rule(OBJECT, Action.MANAGE_SCORE_TYPES, "POST", ok=302),
    "project_prices": Rule(OBJECT, READ),
    "project_price_add": Rule(OBJECT, Action.MANAGE_PRICES, "POST", ok=400),  # no pattern
    "project_price_edit": Rule(OBJECT, Action.MANAGE_PRICES, "POST", ok=400),
    "project_price_delete": Rule(OBJECT, Action.MANAGE_PRICES, "POST", ok=302),
    # an invitation's link: any signed-in user holding it (tests/streams/access/
    # test_invitations.py); accepting it makes them a viewer (undone before the next route)
    "invitation": Rule(PROJECT, READ),
    "invitation_accept": Rule(PROJECT, READ, "POST", ok=302),
    # alert rules (dashboard/views/alerts.py, the API): everyone in the project reads them,
    # members and up make, change and mute them (the empty forms: no name, no hours)
    "alerts": Rule(PROJECT, READ),
    "alert_rule_new": (Rule(PROJECT, ALERTS), Rule(PROJECT, ALERTS, "POST", ok=400)),
    "alert_backtest": Rule(PROJECT, ALERTS, "POST", ok=400),
    "alert_history": Rule(PROJECT, READ),
    "alert_silences": (Rule(PROJECT, READ), Rule(PROJECT, ALERTS, "POST", ok=400)),
    "alert_silence_end": Rule(OBJECT, ALERTS, "POST", ok=302),
    "alert_rule": (Rule(OBJECT, READ), Rule(OBJECT, ALERTS, "POST", ok=400)),
    "alert_rule_delete": Rule(OBJECT, ALERTS, "POST", ok=302),
    "api_alert_rules": (
        Rule(PROJECT, READ, api=True),
        Rule(PROJECT, ALERTS, "POST", ok=400, api=True),  # (a form, not JSON)
    ),
    "api_alert_rule": (
        Rule(OBJECT, READ, api=True),
        Rule(OBJECT, ALERTS, "POST", ok=400, api=True),
    ),
    "api_alert_silences": (
        Rule(PROJECT, READ, api=True),
        Rule(PROJECT, ALERTS, "POST", ok=400, api=True),
    ),
    "api_alert_history": Rule(PROJECT, READ, api=True),
    # datasets and experiments (docs/experiments.md): viewers read, members make and run
    "dataset_list": (Rule(PROJECT, READ), Rule(PROJECT, Action.EXPERIMENT, "POST", ok=400)),
    "dataset_detail": Rule(OBJECT, READ),
    "dataset_upload": Rule(OBJECT, Action.EXPERIMENT, "POST", ok=400),  # no file
    "stream_add_to_dataset": Rule(OBJECT, Action.EXPERIMENT, "POST", ok=400),  # no dataset
    "streams_add_to_dataset": (  # the list's filter: the current project's streams
        Rule(PROJECT, READ),
        Rule(PROJECT, Action.EXPERIMENT, "POST", ok=400),
    ),
    "experiment_list": (
        Rule(PROJECT, READ),
        Rule(PROJECT, Action.EXPERIMENT, "POST", ok=400),  # the empty form
    ),
    "experiment_detail": Rule(OBJECT, READ),
    "experiment_run": Rule(OBJECT, Action.EXPERIMENT, "POST", ok=302),
    "run_detail": Rule(OBJECT, READ),
    "run_cancel": Rule(OBJECT, Action.EXPERIMENT, "POST", ok=302),  # (finished: nothing to do)
    "run_resume": Rule(OBJECT, Action.EXPERIMENT, "POST", ok=302),
    "run_compare": Rule(OBJECT, READ),
    "run_export_csv": Rule(OBJECT, READ),
    "run_export_json": Rule(OBJECT, READ),
    "api_datasets": (
        Rule(PROJECT, READ, api=True),
        Rule(PROJECT, Action.EXPERIMENT, "POST", ok=400, api=True, data=lambda o: {}),  # no name
    ),
    "api_dataset_items": Rule(
        OBJECT, Action.EXPERIMENT, "POST", ok=201, api=True, data=lambda o: {"items": []}
    ),
    "api_experiments": Rule(
        PROJECT,
        Action.EXPERIMENT,
        "POST",
        ok=400,
        api=True,
        data=lambda o: {},  # no dataset
    ),
    "api_experiment_runs": Rule(
        OBJECT, Action.EXPERIMENT, "POST", ok=201, api=True, data=lambda o: {}
    ),
    "api_run": Rule(OBJECT, READ, api=True),
    # evaluators and online rules (the empty form: no name, no stream); the API's edit with
    # nothing changed answers the evaluator as it is
    "evaluator_list": Rule(PROJECT, READ),
    "evaluator_new": (Rule(PROJECT, EVALUATE), Rule(PROJECT, EVALUATE, "POST", ok=400)),
    "evaluator_detail": (Rule(OBJECT, READ), Rule(OBJECT, EVALUATE, "POST", ok=400)),
    "evaluator_try": Rule(OBJECT, EVALUATE, "POST", ok=400),
    "evaluator_delete": Rule(OBJECT, EVALUATE, "POST", ok=302),
    "online_rule_delete": Rule(OBJECT, EVALUATE, "POST", ok=302),
    "online_rule_list": (Rule(PROJECT, READ), Rule(PROJECT, EVALUATE, "POST", ok=400)),
    "online_rule_detail": (Rule(OBJECT, READ), Rule(OBJECT, EVALUATE, "POST", ok=400)),
    "api_evaluators": (
        Rule(PROJECT, READ, api=True),
        Rule(PROJECT, EVALUATE, "POST", ok=400, api=True, data=lambda o: {}),
    ),
    "api_evaluator": (
        Rule(OBJECT, READ, api=True),
        Rule(OBJECT, EVALUATE, "POST", api=True, data=lambda o: {}),
    ),
    "api_evaluator_apply": Rule(OBJECT, EVALUATE, "POST", ok=400, api=True, data=lambda o: {}),
    "api_online_rules": Rule(PROJECT, READ, api=True),
    "api_online_rule": Rule(OBJECT, READ, api=True),
}
WS_RULES = {
    "ws_streams": Rule(PROJECT, READ),
    "ws_stream": Rule(OBJECT, READ),
    "ws_shared_stream": Rule(LINK),
    "ws_proxy_responses": Rule(TOKEN, RUN),
}
# Routes not walked one by one, and why.
SKIPPED_PREFIXES = {
    "admin/": "the Django admin's own pages: every one is wrapped in admin_view (staff login, "
    "then model permissions), which admin:index checks once",
}
# URL parameters: the owner's object that each one names.
PARAMS = {
    "stream_id": lambda objects: objects.stream.pk,
    # the stream compared with it: the owner's still streaming answer (a live comparison)
    "other_id": lambda objects: objects.turn.stream_id,
    "index": lambda objects: objects.event.index,
    "session": lambda objects: objects.stream.session,
    "conversation_id": lambda objects: objects.conversation.pk,
    "view_id": lambda objects: objects.view.pk,  # a private saved view
    "score_id": lambda objects: objects.score.pk,  # the owner's thumbs on their stream
    "turn_id": lambda objects: objects.turn.pk,
    "job_id": lambda objects: objects.job.pk,
    "link_id": lambda objects: objects.links["valid"][0].pk,  # a share link
    "token_id": lambda objects: objects.token.pk,  # the owner's token in the project
    # an alert rule of the project: a fresh one each time (deleting it is allowed to several)
    "rule_id": lambda objects: next(objects.alert_rules).pk,
    "silence_id": lambda objects: objects.silence.pk,  # a silence of that rule
    "channel_id": lambda objects: objects.channel.pk,  # an e-mail channel of the project
    "project_slug": lambda objects: objects.project.slug,
    "user_id": lambda objects: objects.owner.pk,  # the project's owner, its last
    "invitation_id": lambda objects: objects.invitation.pk,
    "score_type_id": lambda objects: objects.score_type.pk,  # the project's own, unused
    "price_id": lambda objects: objects.price.pk,  # the project's own
    "evaluator_id": lambda objects: next(objects.evaluators).pk,
    "online_rule_id": lambda objects: next(objects.online_rules).pk,
    "key": lambda objects: next(objects.invitation_keys),  # a fresh one each time: works once
    # a share link's secret: the one of the kind the case holds (`cases`)
    "secret": lambda objects, kind="valid": objects.links[kind][1],
    "dataset_id": lambda objects: objects.experiments.dataset.pk,
    "experiment_id": lambda objects: objects.experiments.experiment.pk,
    "run_id": lambda objects: objects.experiments.run.pk,
    "other_run_id": lambda objects: objects.experiments.earlier.pk,
}
# The parameters whose object each request uses up (a fresh one each time, above): a route with one
# gets its objects made again, as does every route after one that POSTs (it may have deleted or
# changed them). A GET changes nothing, so the routes after one reuse its objects; a GET that did
# would fail the routes after it.
USED_UP = {"rule_id", "evaluator_id", "online_rule_id", "key"}
_PARAM = re.compile(r"<(?:\w+:)?(\w+)>")


@dataclass(frozen=True)
class Route:
    key: str  # the name (namespaced), or the route when it has none
    route: str  # e.g. "streams/<int:stream_id>/", without the leading slash

    @property
    def params(self):
        return _PARAM.findall(self.route)


def http_routes():
    def walk(patterns, prefix, namespace):
        for p in patterns:
            route = prefix + str(p.pattern)
            if isinstance(p, URLResolver):
                inner = ":".join(n for n in (namespace, p.namespace) if n)
                yield from walk(p.url_patterns, route, inner)
            else:
                name = ":".join(n for n in (namespace, p.name) if n) if p.name else ""
                yield Route(name or route, route)

    return list(walk(get_resolver().url_patterns, "", ""))


def ws_routes():
    return [Route(p.name or str(p.pattern), str(p.pattern)) for p in websocket_urlpatterns]


def against(routes, rules):
    """(the routes to walk, keys of routes without a rule, keys of rules without a route)."""
    skipped = tuple(SKIPPED_PREFIXES)
    walked = [r for r in routes if r.key in rules or not r.route.startswith(skipped)]
    missing = sorted({r.key for r in walked if r.key not in rules})
    stale = sorted(set(rules) - {r.key for r in walked})
    return [r for r in walked if r.key in rules], missing, stale


def path_of(route, objects, link=None):
    """The route's path for `objects`; `link`: the kind of share link whose secret it holds."""

    def value(match):
        name = match.group(1)
        if name not in PARAMS:
            raise AssertionError(f"route {route.key!r}: no value for <{name}>; add it to PARAMS")
        if name == "secret":
            return PARAMS[name](objects, link or "valid")
        return str(PARAMS[name](objects))

    if "^" in route.route or "(?P<" in route.route:
        raise AssertionError(f"route {route.key!r} is a regex; PARAMS fills path() routes only")
    return "/" + _PARAM.sub(value, route.route)


class OwnedObjects:
    """Fresh objects of `owner` in `project` for the routes up to the next that may change them
    (`USED_UP`; a POST may delete its object), each made when a route first names it (a route
    names a few: making all of them for each was most of the walk's setup, and the lists of the
    project's things grew with every set): a finished stream with one event (in a session), a
    conversation whose one turn is still streaming its answer, and the rest PARAMS names. Read
    in a thread (`request_of`): making one is a query."""

    def __init__(self, owner, project):
        self.owner, self.project = owner, project
        self.n = next(_sets)  # (unique names: the project keeps the earlier sets' objects)

    @cached_property
    def stream(self):
        return Stream.objects.create(
            user=self.owner,
            project=self.project,
            status=Stream.Status.COMPLETED,
            event_count=1,
            session="access-session",
        )

    @cached_property
    def event(self):
        data = '{"type":"response.created","sequence_number":0}'
        return Event.objects.create(
            stream=self.stream, index=0, type="response.created", sequence_number=0, t_us=0,
            data=data,
        )  # fmt: skip

    @cached_property
    def conversation(self):
        return Conversation.objects.create(user=self.owner, project=self.project, title="Access")

    @cached_property
    def turn(self):
        answer = Stream.objects.create(
            user=self.owner,
            project=self.project,
            status=Stream.Status.STREAMING,
            requested_model="auto",
            request_body={"model": "auto", "input": [{"role": "user", "content": "Hi"}]},
        )
        return Turn.objects.create(
            conversation=self.conversation, position=0, prompt="Hi", stream=answer
        )

    @cached_property
    def job(self):
        return ImportJob.objects.create(
            user=self.owner, project=self.project, status=ImportJob.Status.DONE
        )

    @cached_property
    def view(self):
        return SavedView.objects.create(
            owner=self.owner, project=self.project, name=f"Mine {self.n}", page="latency"
        )

    @cached_property
    def score(self):
        return scores.give(self.stream.pk, author=self.owner, name="thumbs", value=1,
                           source="person")  # fmt: skip

    @cached_property
    def _invitations(self):
        # (the earlier routes' invitations out of the way: a project has at most MAX_OPEN open)
        Invitation.objects.filter(project=self.project).delete()
        return [invitations.invite(self.owner, self.project, "x@example.com", "viewer")
                for _n in range(8)]  # fmt: skip

    @cached_property
    def invitation(self):
        return self._invitations[0][0]

    @cached_property
    def invitation_keys(self):
        return iter(secret for _i, secret in self._invitations)

    @cached_property
    def token(self):
        token = ApiToken.issue(self.owner, name="access", project=self.project)
        return ApiToken.objects.get(digest=ApiToken.hash(token))

    @cached_property
    def score_type(self):
        return ScoreType.objects.create(
            project=self.project, name=f"access-{self.n}", kind="numeric", minimum=0, maximum=10
        )

    @cached_property
    def price(self):
        return Price.objects.create(
            project=self.project,
            model_pattern=f"access-{self.n}-*",
            effective_from=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
            input_per_million=1,
            output_per_million=2,
        )

    @cached_property
    def _alert_rules(self):
        return [
            AlertRule.objects.create(
                project=self.project,
                name="Access",
                figure="ttft_p95",
                threshold=1000,
                created_by=self.owner,
            )
            for _n in range(8)
        ]

    @cached_property
    def alert_rules(self):
        return iter(self._alert_rules)

    @cached_property
    def silence(self):
        return Silence.objects.create(
            project=self.project,
            rule=self._alert_rules[0],
            until_at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1),
        )

    @cached_property
    def channel(self):
        Channel.objects.filter(project=self.project).delete()  # (at most MAX_CHANNELS a project)
        channel, _secret = notify_channels.create(
            self.project, f"access {self.n}", "email", "ops@example.com", created_by=self.owner
        )
        return channel

    @cached_property
    def evaluators(self):
        # (deleting them is allowed to several: a fresh one each time; made in bulk)
        return iter(
            Evaluator.objects.bulk_create(
                Evaluator(project=self.project, name=f"access-{self.n}-{n}", kind="json_valid")
                for n in range(10)
            )
        )

    @cached_property
    def online_rules(self):
        evaluator = evaluate.save(
            self.project, name=f"access-eval-{self.n}", kind="json_valid", config={},
            user=self.owner,
        )  # fmt: skip
        made = OnlineRule.objects.bulk_create(
            OnlineRule(project=self.project, name=f"access {n}", created_by=self.owner)
            for n in range(10)
        )
        OnlineRule.evaluators.through.objects.bulk_create(
            OnlineRule.evaluators.through(onlinerule_id=rule.pk, evaluator_id=evaluator.pk)
            for rule in made
        )
        return iter(made)

    @cached_property
    def links(self):
        return share_links(self.owner, self.stream)

    @cached_property
    def experiments(self):
        return experiments.made(self.owner, self.project, items=1, models=("gpt-oss-20b",))


_sets = itertools.count(1)


@sync_to_async
def request_of(route, rule, objects, link=None):
    """The path and the data of a request to `route` under `rule` (its objects made as named)."""
    return path_of(route, objects, link), (rule.data(objects) if rule.data else {})


def share_links(owner, stream):
    """{kind: (link, secret)}: the owner's links to `stream` that a visitor may hold (an open
    one, one for anyone, an expired and a revoked one), a wrong secret, and an open link to
    another of the owner's streams."""
    other = Stream.objects.create(user=owner, project=stream.project, event_count=0)
    links = {
        "valid": shares.create(owner, stream=stream),
        "anyone": shares.create(owner, stream=stream, anyone=True),
        "expired": shares.create(owner, stream=stream),
        "revoked": shares.create(owner, stream=stream),
        "other": shares.create(owner, stream=other),
    }
    ago = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    ShareLink.objects.filter(pk=links["expired"][0].pk).update(expires_at=ago)
    ShareLink.objects.filter(pk=links["revoked"][0].pk).update(revoked_at=ago)
    links["wrong"] = (None, shares.new_secret())
    return links


# ---- who tries ------------------------------------------------------------------------------

Role = Membership.Role


@dataclass(frozen=True)
class Identity:
    who: str
    user: object  # None: signed out
    role: str | None = None  # in the objects' project
    creator: bool = False  # made the objects


@sync_to_async
def identities(people):
    """The seven who try every route, in the order they try (the refused first, the objects'
    creator last: an allowed POST may delete the object), and the objects' project. The owner
    (the project's owner, who made the objects), an admin, a member and a viewer work in the
    objects' project; a member of another project in their own; staff in every project at once."""
    project = Project.objects.create(name="Access", slug="access")
    elsewhere = Project.objects.create(name="Elsewhere", slug="elsewhere")
    Membership.objects.create(project=elsewhere, user=people.stranger, role=Role.OWNER)
    roles = {"owner": Role.OWNER, "admin": Role.ADMIN, "member": Role.MEMBER, "viewer": Role.VIEWER}
    users = {"owner": people.owner}
    for name in ("admin", "member", "viewer"):
        users[name] = with_session(get_user_model().objects.create_user(f"access-{name}"))
    for name, role in roles.items():
        Membership.objects.create(project=project, user=users[name], role=role)
    out = [
        Identity("anonymous", None),
        Identity("a member of another project", people.stranger),
        Identity("a viewer", users["viewer"], Role.VIEWER),
        Identity("a member", users["member"], Role.MEMBER),
        Identity("an admin", users["admin"], Role.ADMIN),
        Identity("staff", people.staff),
        Identity("the owner", people.owner, Role.OWNER, creator=True),
    ]
    return out, project


def with_session(user):
    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    user.cookie = f"{settings.SESSION_COOKIE_NAME}={cookie}"
    return user


def role_allows(role, action):
    return projects.RANKS[role] >= projects.RANKS[projects.ACTIONS[action]]


def expected(rule, route, identity):
    """What `identity` gets from `route` under `rule`: "ok", "403", "404", "login" (anonymous:
    the login page, or 401 from the API), "admin login"."""
    user = identity.user
    if rule.who == PUBLIC:
        return "ok"
    if user is None:
        return "admin login" if rule.who == ADMIN else "login"
    if rule.who in (STAFF, ADMIN):
        return "ok" if user.is_staff else ("403" if rule.who == STAFF else "admin login")
    if rule.who == MEMBERSHIP:
        if identity.role is None:  # (staff are no member)
            return "404"
        return "409" if identity.role == Role.OWNER else "ok"  # (the last owner stays)
    per_object = rule.who in PER_OBJECT and bool(route.params or rule.data)
    if not per_object:  # PROJECT, or a per-object rule's pattern without an object
        if user.is_staff or identity.role is None:  # (a member of another project: its owner)
            return "ok"
        return "ok" if role_allows(identity.role, rule.action) else "403"
    if rule.who == CREATOR and not identity.creator:
        return "404"
    if rule.who == CREATOR_OR_STAFF and not (identity.creator or user.is_staff):
        return "404"
    if rule.who == CREATOR_OR_MANAGER and not identity.creator and not user.is_staff:
        return "ok" if identity.role and role_allows(identity.role, rule.action) else "404"
    if user.is_staff:
        return "ok"
    if identity.role is None:
        return "404"
    return "ok" if role_allows(identity.role, rule.action) else "403"


@dataclass(frozen=True)
class Case:
    who: str
    user: object  # None: signed out
    expect: str  # as `expected` says
    link: str | None = None  # a share link route: the kind of link held (share_links)
    public: bool = False  # STREAMSCOPE_PUBLIC_SHARE_LINKS on


def cases(rule, route, people, who):
    if rule.who == LINK:
        return link_cases(route, people)
    if rule.who == PUBLIC:  # (signed out: a signed-in try of `logout` would end the session)
        return [Case("anonymous", None, "ok")]
    return [Case(i.who, i.user, expected(rule, route, i)) for i in who]


def link_cases(route, people):
    teammate = people.stranger  # signed in, not the owner, not in the project, not staff
    out = [
        Case("anonymous", None, "login", "valid"),
        Case("anonymous, a link for anyone, not allowed here", None, "login", "anyone"),
        Case("anonymous, a link for anyone", None, "ok", "anyone", public=True),
        Case("anonymous with an expired link for anyone", None, "404", "expired", public=True),
        Case("a stranger with a wrong secret", teammate, "404", "wrong"),
        Case("a teammate with an expired link", teammate, "404", "expired"),
        Case("a teammate with a revoked link", teammate, "404", "revoked"),
        Case("staff with a revoked link", people.staff, "404", "revoked"),
    ]
    if "stream_id" in route.params:  # a stream the link does not show
        out.append(Case("a teammate with a link to another stream", teammate, "404", "other"))
    return out + [
        Case("a teammate with the link", teammate, "ok", "valid"),
        Case("staff with the link", people.staff, "ok", "valid"),
        Case("the owner with the link", people.owner, "ok", "valid"),
    ]


def http_problem(rule, case, response, path):
    """What is wrong with `response`, or None."""
    status = response.status_code
    location = urlsplit(response.get("Location", "")).path
    expect = case.expect
    if expect == "ok":
        wanted, ok = f"{rule.ok}", status == rule.ok
    elif expect.isdigit():
        wanted, ok = expect, status == int(expect)
    elif expect == "login" and rule.api:
        wanted, ok = "401", status == 401
    else:
        login = (
            reverse("admin:login") if expect == "admin login" else resolve_url(settings.LOGIN_URL)
        )
        wanted, ok = f"302 to {login}", status == 302 and location == login
    if ok:
        return None
    got = f"{status} to {location}" if location else f"{status}"
    return f"{rule.method} {path} as {case.who}: expected {wanted}, got {got}"


async def send(client, rule, path, data):
    if rule.method == "GET":
        return await client.get(path, data)
    if rule.api and rule.data:
        return await client.post(path, json.dumps(data), content_type="application/json")
    return await client.post(path, data)


def rules_of(rules, key):
    rule = rules[key]
    return rule if isinstance(rule, tuple) else (rule,)


def rule_problems(rules):
    """A rule that needs an action names one projects.ACTIONS knows; only those name one."""
    out = []
    for key in rules:
        for rule in rules_of(rules, key):
            needs = rule.who in (PROJECT, TOKEN) or rule.who in PER_OBJECT
            if needs and rule.action not in projects.ACTIONS:
                out.append(f"{key!r}: a {rule.who} rule must name an action of projects.ACTIONS")
            elif not needs and rule.action is not None:
                out.append(f"{key!r}: a {rule.who} rule names no action")
    return out


async def test_every_route_refuses_whoever_may_not_use_it(people, settings):
    settings.UPSTREAM_BASE_URL = ""  # the built-in simulator's catalogue: no HTTP for a page
    # every route a server has, the identity provider's included
    settings.ROOT_URLCONF = "tests.support.provider_urls"
    settings.STREAMSCOPE = provider_urls.settings(settings.STREAMSCOPE)
    problems = []

    routes, missing, stale = against(http_routes(), RULES)
    ws_checked, ws_missing, ws_stale = against(ws_routes(), WS_RULES)
    problems += [f"new route {key!r} has no access rule (RULES)" for key in missing]
    problems += [f"new WebSocket route {key!r} has no access rule (WS_RULES)" for key in ws_missing]
    problems += [f"RULES has {key!r}, which is no route" for key in stale]
    problems += [f"WS_RULES has {key!r}, which is no WebSocket route" for key in ws_stale]
    problems += link_rule_problems(routes, RULES) + link_rule_problems(ws_checked, WS_RULES)
    problems += rule_problems(RULES) + rule_problems(WS_RULES)
    cache.clear()  # (the wrong secrets below count as wrong tokens of this client's IP)

    who, project = await identities(people)
    users = [i.user for i in who if i.user is not None]
    clients = {user.pk: session(user) for user in users}
    for identity in who:  # where each works (remembered by their session)
        if identity.role is not None:
            response = await clients[identity.user.pk].get(f"/?project={project.slug}")
            assert response.status_code == 200, identity.who
    await clients[people.staff.pk].post("/projects/switch/", {"project": "all"})

    spent = True  # whether the objects must be made again (OwnedObjects)
    for route in routes:
        for rule in rules_of(RULES, route.key):
            if spent or USED_UP.intersection(route.params):
                await memberships_as_they_were(who, project)
                objects = OwnedObjects(people.owner, project)
            spent = rule.method != "GET"
            for case in cases(rule, route, people, who):
                path, data = await request_of(route, rule, objects, case.link)
                public_links(settings, case.public)
                client = AsyncClient() if case.user is None else clients[case.user.pk]
                response = await send(client, rule, path, data)
                problem = http_problem(rule, case, response, path)
                if problem:
                    problems.append(f"{route.key}: {problem}")

    for route in ws_checked:
        rule = WS_RULES[route.key]
        objects = OwnedObjects(people.owner, project)
        for case in cases(rule, route, people, who):
            path = (await request_of(route, rule, objects, case.link))[0] + "?format=json"
            public_links(settings, case.public)
            if rule.who == TOKEN:
                comm = ws(path, None, token=await token_of(case.user, project))
            else:
                comm = ws(path, case.user)
            connected, _ = await comm.connect()
            if connected != (case.expect == "ok"):
                wanted = "accepted" if case.expect == "ok" else "refused"
                problems.append(f"{route.key}: WebSocket {path} as {case.who}: expected {wanted}")

    assert routes and ws_checked
    assert not problems, "\n".join(problems)


@sync_to_async
def token_of(user, project):
    """`user`'s token of the project they work in (TOKEN): the walk's project for its
    members, their own for anyone else; None signed out."""
    if user is None:
        return None
    member = Membership.objects.filter(project=project, user=user).exists()
    return ApiToken.issue(user, name="access walk", project=project if member else None)


@sync_to_async
def memberships_as_they_were(who, project):
    """The objects' project's members as `identities` made them: a route may have changed
    them (leaving it, accepting an invitation to it)."""
    roles = {i.user.pk: i.role for i in who if i.role is not None}
    Membership.objects.filter(project=project).exclude(user_id__in=roles).delete()
    for user_id, role in roles.items():
        Membership.objects.update_or_create(
            project=project, user_id=user_id, defaults={"role": role}
        )


def public_links(settings, on):
    # only on a change: each assignment nests one more override of the settings (pytest-django
    # keeps them all until the test ends), and one per case ran past the recursion limit
    if settings.STREAMSCOPE.get("PUBLIC_SHARE_LINKS") != on:
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "PUBLIC_SHARE_LINKS": on}


def link_rule_problems(routes, rules):
    """A route with a share link's secret has the LINK rule, and only such a route has it: a
    link route cannot slip through with a rule whose cases never hold a link."""
    out = []
    for route in routes:
        has_secret = "secret" in route.params
        link = all(rule.who == LINK for rule in rules_of(rules, route.key))
        if has_secret and not link:
            out.append(f"{route.key!r} takes a share link's secret: its rule must be LINK")
        elif link and not has_secret:
            out.append(f"{route.key!r} has the LINK rule but no <secret> in its route")
    return out
