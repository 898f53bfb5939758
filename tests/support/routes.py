"""Every route a server has, and paths to fetch for each: the URL patterns of Django's resolver
(walked recursively, admin included) and the WebSocket routes of streams/serve/sockets.py, each with
its path parameters filled from a table the caller gives.

    routes = django_routes() + websocket_routes()
    paths, unfilled = fill(route, fill_param)   # fill_param(route, name, bound) -> [values]

A parameter the table cannot fill is reported (`Unfillable`) with the route's name, never
skipped, so a route added later is either walked or named in a failure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RegexPattern, RoutePattern

_ROUTE_PARAM = re.compile(r"<(?:(?P<converter>[^>:]+):)?(?P<name>[^>]+)>")
_REGEX_GROUP = re.compile(r"\(\?P<(?P<name>\w+)>")
_REGEX_META = re.compile(r"[\\()\[\]{}*+?|^$]")


class Unfillable(Exception):
    """A route parameter the fill table has no value for."""


@dataclass
class Route:
    kind: str  # "http" or "websocket"
    name: str  # "namespace:name", or the pattern's text when it has no name
    parts: tuple  # the pattern objects from the root to the route
    callback: object
    model: type | None = None  # the model of the ModelAdmin whose urls hold it
    params: list[str] = field(default_factory=list)

    @property
    def text(self):
        return "".join(_text(p) for p in self.parts)

    def __str__(self):
        return f"{self.name} ({self.text})"


def _text(pattern):
    if isinstance(pattern, RegexPattern):
        return pattern._regex
    return str(pattern)


def _params(pattern):
    if isinstance(pattern, RoutePattern):
        return [m.group("name") for m in _ROUTE_PARAM.finditer(pattern._route)]
    if isinstance(pattern, RegexPattern):
        return [m.group("name") for m in _REGEX_GROUP.finditer(pattern._regex)]
    raise Unfillable(f"unknown pattern type {type(pattern).__name__}")


def _admin_model(resolver):
    """The model whose ModelAdmin's urls `resolver` includes (its views carry `model_admin`),
    or None."""
    for p in resolver.url_patterns:
        model_admin = getattr(getattr(p, "callback", None), "model_admin", None)
        if model_admin is not None:
            return model_admin.model
    return None


def django_routes(resolver=None):
    """Every URLPattern under `resolver` (the root URLconf's by default), recursively."""
    out = []

    def walk(patterns, prefix, namespaces, model):
        for p in patterns:
            if isinstance(p, URLResolver):
                ns = [*namespaces, p.namespace] if p.namespace else namespaces
                walk(p.url_patterns, (*prefix, p.pattern), ns, _admin_model(p) or model)
                continue
            assert isinstance(p, URLPattern), p
            parts = (*prefix, p.pattern)
            own = getattr(p.callback, "model_admin", None)
            route = Route(
                "http",
                ":".join([*namespaces, p.name]) if p.name else "".join(map(_text, parts)),
                parts,
                p.callback,
                own.model if own is not None else model,
            )
            route.params = [name for part in parts for name in _params(part)]
            out.append(route)

    walk((resolver or get_resolver()).url_patterns, (), [], None)
    return out


def websocket_routes(patterns=None):
    """The WebSocket routes (streams/serve/sockets.py's `websocket_urlpatterns`), like URL
    patterns."""
    if patterns is None:
        from streams.serve.sockets import websocket_urlpatterns as patterns
    out = []
    for p in patterns:
        if isinstance(p, URLResolver):  # (none today; walked like Django's if one comes)
            for route in django_routes(p):
                route.kind = "websocket"
                route.parts = (p.pattern, *route.parts)
                out.append(route)
            continue
        route = Route("websocket", p.name or _text(p.pattern), (p.pattern,), p.callback)
        route.params = _params(p.pattern)
        out.append(route)
    return out


def _fill_part(pattern, values):
    if isinstance(pattern, RoutePattern):

        def one(m):
            converter = pattern.converters[m.group("name")]
            return str(converter.to_url(values[m.group("name")]))

        return _ROUTE_PARAM.sub(one, pattern._route)
    text = pattern._regex.removeprefix("^").removesuffix("$")
    # replace each named group (balanced parentheses) by its value
    out, i = [], 0
    for m in _REGEX_GROUP.finditer(text):
        if m.start() < i:
            raise Unfillable(f"nested groups in {pattern._regex!r}")
        out.append(text[i : m.start()])
        depth, j = 1, m.end()
        while depth:
            if j >= len(text):
                raise Unfillable(f"unbalanced group in {pattern._regex!r}")
            depth += {"(": 1, ")": -1}.get(text[j], 0) if text[j - 1] != "\\" else 0
            j += 1
        out.append(str(values[m.group("name")]))
        i = j
    rest = text[i:]
    if _REGEX_META.search(rest) or _REGEX_META.search("".join(out[::2])):
        raise Unfillable(f"a regex pattern that is not a plain path: {pattern._regex!r}")
    out.append(rest)
    return "".join(out)


def fill(route, fill_param, limit=None):
    """The paths of `route` with every parameter filled by `fill_param(route, name, bound)`
    (a list of values; `bound` the parameters filled so far, so one may depend on another),
    every combination. Raises Unfillable naming the route and the parameter."""
    combos = [{}]
    for name in route.params:
        grown = []
        for bound in combos:
            values = fill_param(route, name, bound)
            if values is None:
                raise Unfillable(f"{route}: no value for the parameter {name!r}")
            grown += [{**bound, name: v} for v in values]
        if not grown:
            raise Unfillable(f"{route}: the history has no value for {name!r}")
        combos = grown
    paths = []
    for values in combos[:limit]:
        paths.append("/" + "".join(_fill_part(p, values) for p in route.parts))
    return paths


def check_resolves(route, path):
    """Whether `path` (an http route's) resolves to `route` itself, not to another pattern."""
    from django.urls import Resolver404, resolve

    try:
        match = resolve(path)
    except Resolver404:
        return False
    return match.func is route.callback
