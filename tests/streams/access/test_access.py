"""Who may use what, for every route at once: every URL pattern (found at runtime, recursively)
and every WebSocket route is requested by whoever must be refused, and by whoever must not be.

The table below says, per route, who may use it. A route without a row fails the test, and so
does a row whose route is gone: a new view cannot ship without saying who may use it. Adding a
route is one line in RULES (or WS_RULES); a new URL parameter is one line in PARAMS.

Refusals: pages send anonymous users to the login page (302), the JSON API answers them 401, the
admin sends anyone who is not staff to its own login; someone else's object is a 404 (its id
must not leak, so never a 403); a staff-only page is a 403 for other users; a WebSocket
handshake is refused. The allowed users' status is checked too, so the test fails both ways.

Share links' routes (a `<secret>` in the URL: LINK) are tried with the link of each kind a
visitor may hold: the owner's, a teammate's (another signed-in user with the link: allowed),
staff's; a stranger's wrong secret, an expired and a revoked link, a link to another stream
(404 / refused); signed out (the login page, unless the link is for anyone and the instance
allows it). A route with a secret must have the LINK rule, and only such routes may."""

import datetime as dt
import re
from dataclasses import dataclass
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.cache import cache
from django.shortcuts import resolve_url
from django.test import AsyncClient
from django.urls import URLResolver, get_resolver, reverse

from dashboard.models import Conversation, SavedView, Turn
from streams.access import invitations, shares
from streams.live.sockets import websocket_urlpatterns
from streams.models import ApiToken, Event, ImportJob, Invitation, Project, ShareLink, Stream
from streams.store import scores
from tests.support import provider_urls
from tests.support.clients import session, ws

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("_disconnect_communicators"),  # tests/conftest.py: `ws`'s cleanup
]

# Who may use a route.
PUBLIC = "public"  # anyone, logged in or not
USER = "user"  # any logged-in user
STAFF = "staff"  # staff only: other users get 403
OWNER_OR_STAFF = "owner or staff"  # the object's owner and staff; anyone else gets 404
OWNER = "owner"  # the object's owner only: anyone else, staff included, gets 404
ADMIN = "admin"  # the Django admin: whoever is not staff goes to the admin's own login
# A share link's pages and socket: any signed-in user holding an open link (signed out too when
# the link is for anyone and the instance allows it); anyone else 404 / refused (streams/store/
# shares.py)
LINK = "link"


@dataclass(frozen=True)
class Rule:
    who: str
    method: str = "GET"  # POSTs send an empty form: refused before it is read, or rejected after
    ok: int = 200  # what an allowed user gets
    api: bool = False  # JSON API: anonymous requests get 401, not a login redirect


# Keyed by route name (the route itself when it has none). A per-object rule applies its object
# check only to patterns of that name that carry an object in the URL (playground_send has a
# pattern with a conversation and one without).
RULES = {
    "login": Rule(PUBLIC),
    # the identity provider's (tests/support/provider_urls.py): off to it, back from it (no
    # state: back to the login page, which says so), and signing out there too
    "oidc_authentication_init": Rule(PUBLIC, ok=302),
    "oidc_authentication_callback": Rule(PUBLIC, ok=302),
    "oidc_logout": Rule(PUBLIC, "POST", ok=302),
    "logout": Rule(PUBLIC, "POST", ok=302),
    "favicon.ico": Rule(PUBLIC, ok=301),
    # the language switcher (signed out too: the login page has it) and the scripts' strings
    "set_language": Rule(PUBLIC, "POST", ok=302),
    "javascript_catalog": Rule(PUBLIC),
    "set_time_zone": Rule(PUBLIC, "POST", ok=400),  # the empty form: no zone
    "switch_project": Rule(USER, "POST", ok=400),  # the empty form: no project
    "admin:index": Rule(ADMIN),
    "stream_list": Rule(USER),
    "stream_list_csv": Rule(USER),  # the list as CSV: their own streams (staff: all)
    "stream_upload": Rule(USER),
    "import_job": Rule(OWNER),  # an import job's progress: its owner's only
    "import_cancel": Rule(OWNER, "POST", ok=302),
    "latency": Rule(USER),
    "routing": Rule(USER),
    "usage": Rule(USER),
    "usage_export": Rule(USER),  # the usage page's per-model table as CSV
    "admin_analytics": Rule(STAFF),
    "stream_detail": Rule(OWNER_OR_STAFF),
    "stream_events": Rule(OWNER_OR_STAFF),
    "stream_event": Rule(OWNER_OR_STAFF),
    "stream_timing": Rule(OWNER_OR_STAFF),
    "stream_replay": Rule(OWNER_OR_STAFF),
    "stream_sse": Rule(OWNER_OR_STAFF),
    "stream_json": Rule(OWNER_OR_STAFF),
    "session_detail": Rule(OWNER_OR_STAFF),  # a session none of yours is in: 404
    "stream_compare": Rule(OWNER_OR_STAFF),  # both streams must be visible: 404 otherwise
    "stream_compare_with": Rule(OWNER_OR_STAFF),
    "stream_compare_pick": Rule(USER),  # the list's two ticked streams, or how to tick them
    # scoring and commenting: whoever may see the stream (the empty form: no value, no text)
    "stream_score": Rule(OWNER_OR_STAFF, "POST", ok=400),
    "stream_comment": Rule(OWNER_OR_STAFF, "POST", ok=400),
    "stream_score_withdraw": Rule(OWNER, "POST", ok=302),  # one's own score only
    "saved_views": Rule(USER),  # one's own views and the shared ones
    "saved_view_delete": Rule(OWNER, "POST", ok=302),
    "api_streams": Rule(USER, api=True),
    "api_stream": Rule(OWNER_OR_STAFF, api=True),
    "api_stream_events": Rule(OWNER_OR_STAFF, api=True),
    "api_stream_cancel": Rule(OWNER_OR_STAFF, "POST", ok=409, api=True),  # it has ended
    # scores and comments name their stream in the body or query
    # (tests/streams/store/test_scores.py: 404 for a stream one may not see): without one, a 400
    "api_scores": Rule(USER, ok=400, api=True),
    "api_comments": Rule(USER, "POST", ok=400, api=True),
    "api_score_types": Rule(USER, api=True),
    "metrics": Rule(STAFF, api=True),  # or METRICS_TOKEN (tests/streams/observe/test_telemetry.py)
    "playground": Rule(USER),
    "playground_conversation": Rule(OWNER),
    "playground_send": Rule(OWNER, "POST", ok=400),  # the empty form: no message
    "playground_turn": Rule(OWNER),
    "playground_retry": Rule(OWNER, "POST", ok=409),  # its answer is still streaming
    "playground_delete": Rule(OWNER, "POST", ok=302),
    "playground_compare": Rule(USER),
    "playground_compare_send": Rule(USER, "POST", ok=400),  # the empty form: no message
    # share links: one's own (share_create: the empty form; whose target:
    # tests/streams/access/test_shares.py)
    "share_list": Rule(USER),
    "share_create": Rule(USER, "POST", ok=400),
    "share_revoke": Rule(OWNER_OR_STAFF, "POST", ok=302),
    # the project's tokens: one's own (an admin's: the project's; tests/test_tokens.py)
    "token_list": Rule(USER),
    "token_revoke": Rule(OWNER_OR_STAFF, "POST", ok=302),
    "shared": Rule(LINK),
    "shared_stream": Rule(LINK),
    "shared_stream_events": Rule(LINK),
    "shared_stream_event": Rule(LINK),
    "shared_stream_timing": Rule(LINK),
    "shared_stream_replay": Rule(LINK),
    # projects (dashboard/views/projects.py): one's list; a project's pages for its members
    # (the owner's personal project: another user 404; the roles' 403s:
    # tests/dashboard/views/test_views_projects.py)
    "project_list": Rule(USER),
    "project_create": Rule(USER, "POST", ok=400),  # the empty form: no name
    "project_members": Rule(OWNER_OR_STAFF),
    "project_member_add": Rule(OWNER_OR_STAFF, "POST", ok=400),
    "project_member_role": Rule(OWNER_OR_STAFF, "POST", ok=400),  # the empty form: no role
    "project_member_remove": Rule(OWNER_OR_STAFF, "POST", ok=409),  # the last owner
    "project_leave": Rule(OWNER, "POST", ok=409),  # the last owner; staff is no member: 404
    "project_invite": Rule(OWNER_OR_STAFF, "POST", ok=400),
    "project_invitation_revoke": Rule(OWNER_OR_STAFF, "POST", ok=302),
    "project_settings": Rule(OWNER_OR_STAFF),
    "project_rename": Rule(OWNER_OR_STAFF, "POST", ok=400),
    "project_delete": Rule(OWNER_OR_STAFF, "POST", ok=400),  # the empty form: no confirmation
    # an invitation's link: any signed-in user holding it
    # (tests/streams/access/test_invitations.py)
    "invitation": Rule(USER),
    "invitation_accept": Rule(USER, "POST", ok=302),
}
WS_RULES = {
    "ws_streams": Rule(USER),
    "ws_stream": Rule(OWNER_OR_STAFF),
    "ws_shared_stream": Rule(LINK),
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
    "token_id": lambda objects: objects.token.pk,  # the owner's token
    # a share link's secret: the one of the kind the case holds (`cases`)
    "secret": lambda objects, kind="valid": objects.links[kind][1],
    "project_slug": lambda objects: objects.project.slug,  # the owner's personal project
    "user_id": lambda objects: objects.project.personal_of_id,  # its owner
    "invitation_id": lambda objects: objects.invitation.pk,
    "key": lambda objects: next(objects.invitation_keys),  # a fresh one each time: works once
}
PER_OBJECT = (OWNER_OR_STAFF, OWNER)
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


@sync_to_async
def owned_objects(owner):
    """Fresh objects of `owner` for one route (a route may delete its object): a finished
    stream with one event (in a session), and a conversation whose one turn is still
    streaming its answer."""
    stream = Stream.objects.create(
        user=owner, status=Stream.Status.COMPLETED, event_count=1, session="access-session"
    )
    data = '{"type":"response.created","sequence_number":0}'
    event = Event.objects.create(
        stream=stream, index=0, type="response.created", sequence_number=0, t_us=0, data=data
    )
    conversation = Conversation.objects.create(user=owner, title="Access")
    answer = Stream.objects.create(
        user=owner,
        status=Stream.Status.STREAMING,
        requested_model="auto",
        request_body={"model": "auto", "input": [{"role": "user", "content": "Hi"}]},
    )
    turn = Turn.objects.create(conversation=conversation, position=0, prompt="Hi", stream=answer)
    job = ImportJob.objects.create(user=owner, status=ImportJob.Status.DONE)
    view = SavedView.objects.create(owner=owner, name=f"Mine {stream.pk}", page="latency")
    score = scores.give(stream.pk, author=owner, name="thumbs", value=1, source="person")
    project = Project.personal(owner)
    # (the earlier routes' invitations out of the way: a project has at most MAX_OPEN open)
    Invitation.objects.filter(project=project).delete()
    made = [invitations.invite(owner, project, "x@example.com", "viewer") for _n in range(8)]
    return SimpleNamespace(
        project=project,
        invitation=made[0][0],
        invitation_keys=iter(secret for _i, secret in made),
        stream=stream,
        event=event,
        conversation=conversation,
        turn=turn,
        job=job,
        view=view,
        score=score,
        links=share_links(owner, stream),
        token=ApiToken.objects.get(digest=ApiToken.hash(ApiToken.issue(owner, name="access"))),
    )


def share_links(owner, stream):
    """{kind: (link, secret)}: the owner's links to `stream` that a visitor may hold (an open
    one, one for anyone, an expired and a revoked one), a wrong secret, and an open link to
    another of the owner's streams."""
    links = {
        "valid": shares.create(owner, stream=stream),
        "anyone": shares.create(owner, stream=stream, anyone=True),
        "expired": shares.create(owner, stream=stream),
        "revoked": shares.create(owner, stream=stream),
        "other": shares.create(owner, stream=Stream.objects.create(user=owner, event_count=0)),
    }
    ago = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    ShareLink.objects.filter(pk=links["expired"][0].pk).update(expires_at=ago)
    ShareLink.objects.filter(pk=links["revoked"][0].pk).update(revoked_at=ago)
    links["wrong"] = (None, shares.new_secret())
    return links


@dataclass(frozen=True)
class Case:
    who: str
    user: object  # None: signed out
    allowed: bool
    link: str | None = None  # a share link route: the kind of link held (share_links)
    public: bool = False  # STREAMSCOPE_PUBLIC_SHARE_LINKS on
    refusal: str | None = None  # "404" or "login" where the rule alone does not say


def cases(rule, route, people):
    """The Cases in the order they are tried: the refused first, the owner last (an allowed
    POST may delete the object)."""
    per_object = rule.who in PER_OBJECT and bool(route.params)
    if rule.who == LINK:
        return link_cases(route, people)
    if rule.who == PUBLIC:
        return [Case("anonymous", None, True)]
    out = [Case("anonymous", None, False)]
    if rule.who in (STAFF, ADMIN):
        return out + [
            Case("a non-staff user", people.owner, False),
            Case("staff", people.staff, True),
        ]
    if per_object:
        out.append(Case("another user", people.stranger, False))
    out.append(Case("staff", people.staff, not (per_object and rule.who == OWNER)))
    return out + [Case("the owner", people.owner, True)]


def link_cases(route, people):
    teammate = people.stranger  # signed in, not the owner, not staff
    out = [
        Case("anonymous", None, False, "valid", refusal="login"),
        Case("anonymous, a link for anyone, not allowed here", None, False, "anyone",
             refusal="login"),
        Case("anonymous, a link for anyone", None, True, "anyone", public=True),
        Case("anonymous with an expired link for anyone", None, False, "expired", public=True,
             refusal="404"),
        Case("a stranger with a wrong secret", teammate, False, "wrong", refusal="404"),
        Case("a teammate with an expired link", teammate, False, "expired", refusal="404"),
        Case("a teammate with a revoked link", teammate, False, "revoked", refusal="404"),
        Case("staff with a revoked link", people.staff, False, "revoked", refusal="404"),
    ]  # fmt: skip
    if "stream_id" in route.params:  # a stream the link does not show
        out.append(Case("a teammate with a link to another stream", teammate, False, "other",
                        refusal="404"))  # fmt: skip
    return out + [
        Case("a teammate with the link", teammate, True, "valid"),
        Case("staff with the link", people.staff, True, "valid"),
        Case("the owner with the link", people.owner, True, "valid"),
    ]


def http_problem(rule, who, allowed, response, path, refusal=None):
    """What is wrong with `response`, or None."""
    status = response.status_code
    location = urlsplit(response.get("Location", "")).path
    if refusal == "login":
        who = "anonymous"
    if allowed:
        expected, ok = f"{rule.ok}", status == rule.ok
    elif refusal == "404":
        expected, ok = "404", status == 404
    elif who == "anonymous" and rule.api:
        expected, ok = "401", status == 401
    elif rule.who == ADMIN:
        login = reverse("admin:login")
        expected, ok = f"302 to {login}", status == 302 and location == login
    elif who == "anonymous":
        login = resolve_url(settings.LOGIN_URL)
        expected, ok = f"302 to {login}", status == 302 and location == login
    elif rule.who == STAFF:
        expected, ok = "403", status == 403
    else:
        expected, ok = "404", status == 404
    if ok:
        return None
    got = f"{status} to {location}" if location else f"{status}"
    return f"{rule.method} {path} as {who}: expected {expected}, got {got}"


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
    cache.clear()  # (the wrong secrets below count as wrong tokens of this client's IP)

    clients = {user.pk: session(user) for user in (people.owner, people.stranger, people.staff)}

    for route in routes:
        rule = RULES[route.key]
        objects = await owned_objects(people.owner)
        for case in cases(rule, route, people):
            path = path_of(route, objects, case.link)
            public_links(settings, case.public)
            client = AsyncClient() if case.user is None else clients[case.user.pk]
            if rule.method == "GET":
                response = await client.get(path)
            else:
                response = await client.post(path, {})
            problem = http_problem(rule, case.who, case.allowed, response, path, case.refusal)
            if problem:
                problems.append(f"{route.key}: {problem}")

    for route in ws_checked:
        rule = WS_RULES[route.key]
        objects = await owned_objects(people.owner)
        for case in cases(rule, route, people):
            path = path_of(route, objects, case.link) + "?format=json"
            public_links(settings, case.public)
            connected, _ = await ws(path, case.user).connect()
            if connected != case.allowed:
                expected = "accepted" if case.allowed else "refused"
                problems.append(f"{route.key}: WebSocket {path} as {case.who}: expected {expected}")

    assert routes and ws_checked
    assert not problems, "\n".join(problems)


def public_links(settings, on):
    settings.STREAMSCOPE = {**settings.STREAMSCOPE, "PUBLIC_SHARE_LINKS": on}


def link_rule_problems(routes, rules):
    """A route with a share link's secret has the LINK rule, and only such a route has it: a
    link route cannot slip through with a rule whose cases never hold a link."""
    out = []
    for route in routes:
        has_secret = "secret" in route.params
        if has_secret and rules[route.key].who != LINK:
            out.append(f"{route.key!r} takes a share link's secret: its rule must be LINK")
        elif rules[route.key].who == LINK and not has_secret:
            out.append(f"{route.key!r} has the LINK rule but no <secret> in its route")
    return out
