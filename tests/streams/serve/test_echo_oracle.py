"""The egress gate is no oracle for a key's characters (issue 42): a page that shows a person's
own text back (the list's search box and its links, a saved view's name) must answer a right
and a wrong guess of a key's next character alike. Through a real Daphne, for the configured
key and a pass-through key: from the key's public prefix, one character at a time, as an
attacker who knows the prefix would slide, until the guess would hold FRAGMENT_MIN characters
of the key's private core (the first answer then costs a blind guess of 8 characters at once).

Checked to fail with the rules of every window (a temporary revert of
streams/core/redaction.py's `private_core` to `(0, len(secret))`): the right guess comes back
`[redacted]`, the wrong one as typed."""

import html
import re
import time
from urllib.parse import quote_plus

import httpx
import pytest

from dashboard.models import SavedView
from streams.core.redaction import FRAGMENT_MIN
from streams.models import Project
from streams.store import known_secrets
from tests.conftest import DaphneServer

# (public prefix | private core | last 4: docs/security.md, "The egress gate")
KEY = "sk-proj-OhbVrpoiVgRV5IfLBcbfnoGMbJmTPSIAoCLrZ3aWZkSBvrjn"
PASS_KEY = "sk-ant-api03-xwnQrS7RPeMOkIUpkDyr7OSJoRu1XXdo0cZuzren"
PREFIXES = {KEY: len("sk-proj-"), PASS_KEY: len("sk-ant-api03-")}
# What differs between two answers to the same request: the CSRF token (masked anew each
# time) and the CSP nonce.
_VOLATILE = re.compile(
    r'(name="csrfmiddlewaretoken" value=|nonce=|"X-CSRFToken": |csrftoken=)"?[A-Za-z0-9+/=_-]+"?'
)


@pytest.fixture
def server(people, simulator_process):
    server = DaphneServer(simulator_process.base_url, env={"UPSTREAM_API_KEY": KEY})
    known_secrets.remember(PASS_KEY)  # sealed: the server knows it within REFRESH_S
    time.sleep(known_secrets.REFRESH_S + 0.2)
    yield server
    known_secrets.forget_all()
    server.stop()


def _same_apart_from(text, guess):
    """`text` with the guess (as typed, URL- and HTML-escaped) and the volatile parts taken
    out: two answers that differ in nothing else compare equal."""
    for form in (quote_plus(guess), html.escape(guess), guess):
        text = text.replace(form, "«guess»")
    return _VOLATILE.sub(r"\1«…»", text)


def _guesses(key):
    """(right, wrong) texts as an attacker slides: the last FRAGMENT_MIN - 1 characters known
    (the public prefix, then the core's characters found so far), then the right or a wrong
    k-th core character, for k = 1 … FRAGMENT_MIN - 1."""
    lead = PREFIXES[key]
    for k in range(1, FRAGMENT_MIN):
        known, right = key[lead + k - FRAGMENT_MIN : lead + k - 1], key[lead + k - 1]
        wrong = "x" if right.lower() != "x" else "y"
        yield known + right, known + wrong


def _search(client, guess):
    r = client.get(f"/?q={quote_plus(guess)}")
    assert r.status_code == 200, (guess, r.status_code)
    return r.text


def _view_name(client, view, guess):
    view.name = guess
    view.save(update_fields=["name"])
    r = client.get("/views/")
    assert r.status_code == 200, r.status_code
    return r.text


def test_a_right_and_a_wrong_next_character_are_answered_alike(server, people):
    view = SavedView.objects.create(
        owner=people.owner,
        project=Project.personal(people.owner),  # (the page lists its project's views)
        name="v",
        page="stream_list",
        query="",
    )
    echoes = {"search box": _search, "saved view name": lambda c, g: _view_name(c, view, g)}
    seen = {}
    with httpx.Client(
        base_url=server.url, timeout=30, headers={"Cookie": people.owner.cookie}
    ) as client:
        for key in (KEY, PASS_KEY):
            for name, echo in echoes.items():
                for right, wrong in _guesses(key):
                    answers = [echo(client, guess) for guess in (right, wrong)]
                    assert html.escape(wrong) in answers[1]  # (the page does echo it)
                    same = [
                        _same_apart_from(a, g) for a, g in zip(answers, (right, wrong), strict=True)
                    ]
                    seen[key, name, right] = same[0] == same[1]
        # the check sees a difference where there is one: a guess that holds 8 core characters
        lead = PREFIXES[KEY]
        whole = _search(client, KEY[: lead + FRAGMENT_MIN])
        assert "[redacted]" in whole and KEY[lead : lead + FRAGMENT_MIN] not in whole
        assert _same_apart_from(whole, KEY[: lead + FRAGMENT_MIN]) != _same_apart_from(
            _search(client, KEY[: lead + FRAGMENT_MIN - 1] + "x"), KEY[: lead + 7] + "x"
        )
    assert [k for k, alike in seen.items() if not alike] == []
    assert len(seen) == 2 * 2 * (FRAGMENT_MIN - 1)
