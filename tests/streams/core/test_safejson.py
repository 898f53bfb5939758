"""streams.core.safejson reads what strangers wrote in time linear in its length: the crafted body
that froze the server (an unterminated string of escaped quotes after many brackets) and its
relatives, measured in this process's CPU time (which a busy machine does not inflate)."""

import time

import pytest

from streams.core import safejson


def cpu_seconds(fn, *args):
    start = time.process_time()
    fn(*args)
    return time.process_time() - start


@pytest.mark.parametrize(
    "make",
    [
        lambda n: "[]" * 65 + '"' + '\\"' * n,  # the attack: 32 KB took 3.4 s, 4x per doubling
        lambda n: "[]" * 65 + '"' + "\\" * (2 * n) + "x",
        lambda n: "[]" * 65 + ('"a' + '\\"' * 8) * (n // 8),
        lambda n: "{}" * 65 + '"' * n,
    ],
)
def test_a_megabyte_of_crafted_text_is_checked_in_linear_time(make):
    text = make(500_000)
    assert len(text) >= 500_000
    # linear: ~0.1 s of CPU for 1 MB here; quadratic would be hours
    assert cpu_seconds(safejson.too_deep, text, safejson.MAX_DEPTH) < 2.0
    with pytest.raises(ValueError):
        safejson.loads(text)


def test_depth_is_still_counted_outside_strings_only():
    assert not safejson.too_deep("[" * 3 + '"[[[[[[\\"[[[["' + "]" * 3, 3)
    assert safejson.too_deep("[" * 4 + "]" * 4, 3)
    assert not safejson.too_deep("[" * 70 + '"unterminated [[[', 70)
    assert safejson.too_deep("[" * 71 + '"unterminated', 70)
    assert safejson.loads('{"a": ["\\"[", 1]}') == {"a": ['"[', 1]}


@pytest.mark.parametrize(
    "text",
    ['{"input": "x\\ud800"}', '{"metadata": {"\\udc00": "v"}}', '["a", ["\\uDBFF"]]'],
)
def test_a_lone_surrogate_is_refused_saying_so(text):
    with pytest.raises(ValueError, match="lone surrogate"):
        safejson.loads(text)


def test_a_surrogate_pair_is_text():
    assert safejson.loads('{"e": "\\ud83d\\ude00", "b": "\\\\ud800"}') == {
        "e": "\U0001f600",
        "b": "\\ud800",
    }
