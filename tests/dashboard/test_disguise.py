"""Text that disguises itself (issue 42): the server's markers for hidden characters
(dashboard/disguise.py) and where the pages use them (the output, an event's data and summary).

The scripts' definition (static/js/disguise.js) is held to this one in
tests/e2e/test_disguise_e2e.py.
"""

import unicodedata

import pytest
from django.template import Context, Template
from django.utils.safestring import mark_safe

from dashboard import disguise
from streams.ingest.importer import import_capture
from streams.models import Stream
from tests.support.captures import text_capture

pytestmark = pytest.mark.django_db

RLO = "\u202e"
ZWJ = "\u200d"


def render(source, **context):
    return Template("{% load inspection %}" + source).render(Context(context))


class TestMarkers:
    def test_an_override_is_drawn_as_a_named_marker(self):
        html = disguise.reveal_html(f"factuur{RLO}fdp.exe")
        assert RLO not in html
        assert html == (
            'factuur<span class="hidden-char" role="img" data-cp="202E" '
            'title="U+202E RIGHT-TO-LEFT OVERRIDE">⟨U+202E⟩</span>fdp.exe'
        )

    def test_the_text_around_a_marker_is_escaped(self):
        html = disguise.reveal_html(f"<b>{ZWJ}&")
        assert html.startswith("&lt;b&gt;<span") and html.endswith("</span>&amp;")

    def test_safe_html_keeps_its_tags_and_gets_markers_between_them(self):
        html = disguise.reveal_html(mark_safe(f"a <mark>pay{ZWJ}pal</mark> &amp; b"))
        assert html.startswith("a <mark>pay<span") and html.endswith("pal</mark> &amp; b")

    def test_a_run_of_one_character_is_one_marker(self):
        html = disguise.reveal_html("a" + "\u200b" * 40 + "b")
        assert html.count("<span") == 1
        assert 'data-n="40"' in html and "⟨U+200B ×40⟩" in html
        assert "U+200B ZERO WIDTH SPACE ×40" in html

    @pytest.mark.parametrize(
        "text",
        [
            "pay\u200dpal",  # a joiner inside a word
            "\ufeffhello",
            "a\u00adb",  # soft hyphen
            "x\u2066y\u2069",  # isolates
            "bell\x07",  # a C0 control
            "next\x85line",  # a C1 control
            "\u3164",  # Hangul filler
            "hi\U000e0068\U000e0069",  # tag characters
            "A\ufe00",  # a variation selector after a letter
            "⚠\ufe0f\ufe0f",  # a second selector after an emoji
        ],
    )
    def test_hidden_characters_are_found(self, text):
        assert disguise.hides(text)
        assert "hidden-char" in disguise.reveal_html(text)

    @pytest.mark.parametrize(
        "text",
        [
            "plain text, tabs\tand\nlines\r\n",
            "⚠\ufe0f warning",  # emoji presentation
            "1\ufe0f\u20e3",  # keycap one
            "👩\u200d💻",  # woman technologist
            "👩🏽\u200d💻",  # with a skin tone
            "❤\ufe0f\u200d🔥",  # heart on fire
            "a\u202fthin space",  # the pages' own thousands separator is visible
        ],
    )
    def test_emoji_and_ordinary_text_are_left_alone(self, text):
        assert not disguise.hides(text)
        assert disguise.reveal_html(text) == text.replace("&", "&amp;")

    def test_a_tag_character_says_what_it_spells(self):
        assert disguise.title(0xE0041) == "U+E0041 TAG ‘A’"

    def test_names_are_unicodes(self):
        for cp, name in disguise.NAMES.items():
            assert unicodedata.name(chr(cp)) == name
        assert disguise.name(0xFE0F) == unicodedata.name("\ufe0f")
        assert disguise.name(0xE01EF) == unicodedata.name("\U000e01ef")
        assert disguise.name(0x1B) == "CONTROL CHARACTER ESC"

    def test_every_default_ignorable_and_control_is_covered(self):
        # Unicode's Cf (format) characters that render as nothing, and every Cc but tab, LF
        # and CR: none slips through (the ranges were typed by hand).
        def covered(cp):
            return any(a <= cp <= b for a, b in disguise.RANGES)

        for cp in range(0x110000):
            category = unicodedata.category(chr(cp))
            if category == "Cc" and chr(cp) not in "\t\n\r":
                assert covered(cp), hex(cp)
        for cp in (0x200B, 0x200E, 0x2061, 0x206F, 0xFEFF, 0xE0001, 0xE007F, 0x180E):
            assert covered(cp), hex(cp)


class TestFilters:
    def test_reveal_leaves_non_text_alone(self):
        assert render("{{ v|reveal }}", v=None) == "None"
        assert render("{{ v|reveal }}", v=3) == "3"

    def test_the_note_is_there_only_when_something_hides(self):
        item = {"parts": [{"text": "fine"}, {"text": f"not{RLO}fine"}]}
        assert "hidden-note" in render("{% hidden_note v %}", v=item)
        assert render("{% hidden_note v %}", v={"parts": [{"text": "fine"}]}) == ""


def capture(text):
    """A stream with one message text, stored as sent (no escapes in its events' data)."""
    return text_capture(text, escaped=False)


class TestPages:
    def test_the_timeline_marks_the_output_and_the_event_table(self, client, people):
        (stream,) = import_capture(capture(f"factuur{RLO}fdp.exe"), "x.sse", user=people.owner)
        client.force_login(people.owner)
        page = client.get(f"/streams/{stream.pk}/").content.decode()
        assert RLO not in page
        # the output, and the summaries of the delta and the .done event
        assert page.count('data-cp="202E"') == 3
        assert page.count('class="hidden-note"') == 1

    def test_the_prompt_is_marked_on_the_timeline_and_in_the_list(self, client, people):
        (stream,) = import_capture(capture("fine"), "x.sse", user=people.owner)
        Stream.objects.filter(pk=stream.pk).update(prompt="do as told\U000e0068\U000e0069")
        client.force_login(people.owner)
        page = client.get(f"/streams/{stream.pk}/").content.decode()
        assert page.count('data-cp="E0068"') == 2  # the prompt's summary and its whole text
        assert "TAG ‘h’" in page
        assert 'data-cp="E0069"' in client.get("/").content.decode()

    def test_an_events_data_is_marked_and_noted(self, client, people):
        (stream,) = import_capture(capture(f"pay{ZWJ}pal"), "x.sse", user=people.owner)
        client.force_login(people.owner)
        done = 4  # response.output_text.done
        page = client.get(f"/streams/{stream.pk}/events/{done}/").content.decode()
        assert ZWJ not in page
        assert page.count('data-cp="200D"') == 2  # JSON and verbatim
        assert 'class="hidden-note"' in page

    def test_the_comparisons_word_diff_is_marked_and_noted(self, client, people):
        (a,) = import_capture(capture(f"factuur{RLO}fdp.exe"), "a.sse", user=people.owner)
        (b,) = import_capture(capture("factuur.pdf"), "b.sse", user=people.owner)
        client.force_login(people.owner)
        page = client.get(f"/streams/{a.pk}/compare/{b.pk}/").content.decode()
        diff = page[page.index('class="word-diff"') :]
        assert RLO not in diff and 'data-cp="202E"' in diff
        assert 'class="hidden-note"' in page

    def test_the_exports_keep_the_characters(self, client, people):
        (stream,) = import_capture(capture(f"factuur{RLO}fdp.exe"), "x.sse", user=people.owner)
        client.force_login(people.owner)
        sse = b"".join(client.get(f"/streams/{stream.pk}.sse").streaming_content).decode()
        assert f"factuur{RLO}fdp.exe" in sse and "hidden-char" not in sse
