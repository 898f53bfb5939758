"""Output that disguises itself (issue 42) and wide Markdown tables, in real Chromium.

The issue's payloads through the real pages: a right-to-left override (`factuur\u202efdp.exe`
reads "factuurexe.pdf"), zero-width characters inside a word, a link whose text names another
host than it goes to, and a host with a Cyrillic letter among Latin ones. The timeline's
rendered and Raw views, its event table and an event's data, the live renderer (output.js, as
a live stream and a replay use it) and the playground must show each hidden character as a
visible marker (in innerText: what a person reads) that reorders nothing, and each link's real
host (punycode for the mixed name, with a warning); what is copied keeps the characters.
The scripts' definition of the characters (static/js/disguise.js) is held to the server's
(dashboard/disguise.py) over every code point.

A 500-column table keeps its cells readable (not squeezed to a character) and scrolls inside
its box instead.
"""

import re

import pytest
from playwright.sync_api import expect

from dashboard import disguise
from dashboard.models import Conversation, Turn
from streams.ingest.importer import import_capture
from streams.models import Event
from tests.e2e.conftest import TIMEOUT_MS, session_cookie
from tests.support.captures import text_capture

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

RLO = "\u202e"
PAYLOAD = (
    f"Invoice: factuur{RLO}fdp.exe\n\n"
    "Log in at pay\u200dpal or micro\u200bsoft today.\n\n"
    "[https://google.ml](https://evil.example)\n\n"
    "See https://\u0430pple.com for details.\n"
)
IDN = "xn--pple-43d.com"  # аpple.com with a Cyrillic а, as the browser resolves it


def stream_with(owner, text):
    (stream,) = import_capture(text_capture(text, escaped=False), "disguise.sse", user=owner)
    return stream


def reads_in_order(locator, word):
    """Whether the characters of `word` (in a text node under `locator`) are laid out left to
    right in the order they are stored: a bidi override would lay them out reversed."""
    return locator.evaluate(
        """(root, word) => {
            const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
            for (let node = walker.nextNode(); node; node = walker.nextNode()) {
                const at = node.data.indexOf(word);
                if (at < 0) continue;
                const xs = [...word].map((_, i) => {
                    const range = document.createRange();
                    range.setStart(node, at + i);
                    range.setEnd(node, at + i + 1);
                    return range.getBoundingClientRect().left;
                });
                return xs.every((x, i) => i === 0 || x > xs[i - 1]);
            }
            return null;
        }""",
        word,
    )


def check_rendered(page, root):
    """The Markdown view of PAYLOAD under `root`: markers, hosts, the note."""
    body = page.locator(f"{root} .part-output_text .md-body")
    expect(body).to_contain_text("factuur⟨U+202E⟩fdp.exe")
    text = body.inner_text()
    assert "pay⟨U+200D⟩pal" in text and "micro⟨U+200B⟩soft" in text, text
    assert RLO not in text and "\u200d" not in text
    assert reads_in_order(body, "fdp.exe") is True
    marker = body.locator(".hidden-char").first
    assert marker.get_attribute("title") == "U+202E RIGHT-TO-LEFT OVERRIDE"
    assert marker.get_attribute("role") == "img"
    # the link reads google.ml and goes to evil.example: its real host stands beside it
    link = body.locator("a", has_text="https://google.ml")
    assert link.get_attribute("href") == "https://evil.example"
    host = link.locator("xpath=following-sibling::*[1]")
    expect(host).to_have_text("↗ evil.example")
    assert "https://google.ml↗ evil.example" in text.replace(" ↗", "↗")
    # a Latin name with a Cyrillic а: punycode, with a warning
    confusable = body.locator(".link-host.confusable")
    expect(confusable).to_have_text(f"⚠ ↗ {IDN}")
    assert "Cyrillic" in confusable.get_attribute("title")
    note = page.locator(f"{root} .item.message > .hidden-note")
    expect(note).to_be_visible()
    expect(note).to_contain_text("Hidden characters")


def check_raw(page, root):
    """The Raw view of PAYLOAD under `root`: markers in place of the characters."""
    page.locator(f"{root} .part-output_text .md-toggle").click()
    raw = page.locator(f"{root} .part-output_text > .text")
    expect(raw).to_be_visible()
    text = raw.inner_text()
    assert "factuur⟨U+202E⟩fdp.exe" in text and "pay⟨U+200D⟩pal" in text, text
    assert RLO not in text
    assert reads_in_order(raw, "fdp.exe") is True
    assert "[https://google.ml](https://evil.example)" in text
    expect(page.locator(f"{root} .item.message > .hidden-note")).to_be_visible()


COPY = """(node) => {
    const range = document.createRange();
    range.selectNodeContents(node);
    const selection = document.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    let copied = null;
    const read = (event) => { copied = event.clipboardData.getData("text/plain"); };
    window.addEventListener("copy", read);
    document.execCommand("copy");
    window.removeEventListener("copy", read);
    return copied;
}"""


def test_the_timeline_shows_what_hides_and_where_links_go(logged_in_page, people, screenshot):
    stream = stream_with(people.owner, PAYLOAD)
    page = logged_in_page(people.owner, path=f"/streams/{stream.pk}/")
    check_rendered(page, "#output-items")
    screenshot(page, "timeline_disguise")
    check_raw(page, "#output-items")
    # a copy of the raw text is the text as sent, characters and all
    copied = page.locator("#output-items .part-output_text > .text").evaluate(COPY)
    assert copied.strip() == PAYLOAD.strip()

    # the event table's summaries, and an event's data (JSON and verbatim)
    done = Event.objects.get(stream=stream, type="response.output_text.done").index
    summary = page.locator(f"#ev-{done} .sum")
    expect(summary).to_contain_text("factuur⟨U+202E⟩fdp.exe")
    page.click(f"#ev-{done} .ev-open")
    detail = page.locator(f"#evd-{done}")
    for view in ("pre.json", "pre.verbatim"):
        text = detail.locator(view).inner_text()
        assert "factuur⟨U+202E⟩fdp.exe" in text and "pay⟨U+200D⟩pal" in text, text
        assert RLO not in text
    expect(detail.locator(".hidden-note")).to_be_visible()
    assert reads_in_order(detail.locator("pre.verbatim"), "fdp.exe") is True
    assert page.errors == [] and page.csp_violations == []


def test_the_live_renderer_shows_what_hides(logged_in_page, people):
    # output.js as a live stream (and a replay) feeds it: the override and a joiner arrive
    # split over deltas, the done event after them.
    stream = stream_with(people.owner, "warm-up")
    page = logged_in_page(people.owner, path=f"/streams/{stream.pk}/")
    page.wait_for_selector("#output-items .md-body")
    chunks = [
        "Invoice: factuur",
        f"{RLO}fdp.exe\n\nLog in at pay",
        "\u200dpal or",
        " micro\u200bsoft.",
    ]
    result = page.evaluate(
        """async (chunks) => {
            const { LiveOutput } = await import("/static/js/output.js");
            const box = document.createElement("div");
            box.id = "live-box";
            document.getElementById("output").append(box);
            const output = new LiveOutput(box);
            const base = { output_index: 0, content_index: 0 };
            const item = { type: "message" };
            output.apply({ type: "response.output_item.added", output_index: 0, item });
            chunks.forEach((delta, i) => {
                const type = "response.output_text.delta";
                output.apply({ type, sequence_number: i, delta, ...base });
                output.flush();
            });
            output.finish();
            const text = box.querySelector(".part-output_text > .text");
            return {
                raw: text.textContent,
                rendered: box.querySelector(".md-body").innerText,
                notes: box.querySelectorAll(".hidden-note").length,
            };
        }""",
        chunks,
    )
    assert (
        result["raw"]
        == "Invoice: factuur⟨U+202E⟩fdp.exe\n\nLog in at pay⟨U+200D⟩pal or micro⟨U+200B⟩soft."
    )
    assert "factuur⟨U+202E⟩fdp.exe" in result["rendered"]
    assert "pay⟨U+200D⟩pal" in result["rendered"]
    assert result["notes"] == 1
    assert reads_in_order(page.locator("#live-box .md-body"), "fdp.exe") is True
    assert page.errors == []


def test_the_playground_shows_what_hides(logged_in_page, people):
    stream = stream_with(people.owner, PAYLOAD)
    conversation = Conversation.objects.create(user=people.owner, title="Disguise")
    Turn.objects.create(conversation=conversation, position=0, prompt="x", stream=stream)
    page = logged_in_page(people.owner, path=f"/playground/{conversation.pk}/")
    check_rendered(page, ".pg-turn:last-child")
    check_raw(page, ".pg-turn:last-child")
    assert page.errors == []


def test_the_notes_and_hosts_speak_dutch(browser, live_server, people):
    stream = stream_with(people.owner, PAYLOAD)
    context = browser.new_context(locale="nl-NL")
    context.set_default_timeout(TIMEOUT_MS)
    context.add_cookies([session_cookie(people.owner, live_server.url)])
    page = context.new_page()
    page.goto(f"{live_server.url}/streams/{stream.pk}/")
    expect(page.locator("#output-items .hidden-note")).to_contain_text("Verborgen tekens:")
    host = page.locator("#output-items .link-host").first
    expect(host).to_have_attribute("title", "Deze link gaat naar evil.example.")
    confusable = page.locator("#output-items .link-host.confusable")
    expect(confusable).to_have_attribute("title", re.compile("Latijnse en Cyrillische letters"))
    # the note the live renderer adds, in the same words
    live = page.evaluate(
        """async () => {
            const { noteHidden } = await import("/static/js/disguise.js");
            const item = document.createElement("article");
            noteHidden(item);
            return item.textContent;
        }"""
    )
    assert live == page.locator("#output-items .hidden-note").inner_text()
    context.close()


def test_a_wide_table_keeps_its_cells_and_scrolls(logged_in_page, people, screenshot):
    columns = 500
    table = (
        "| " + " | ".join(f"col{i}" for i in range(columns)) + " |\n"
        "|" + "---|" * columns + "\n"
        "| " + " | ".join(f"value {i}" for i in range(columns)) + " |\n"
    )
    stream = stream_with(people.owner, "A wide table:\n\n" + table)
    page = logged_in_page(people.owner, path=f"/streams/{stream.pk}/")
    body = page.locator("#output-items .md-body")
    expect(body.locator("table td")).to_have_count(columns)
    shape = body.locator("table").evaluate(
        """(table) => {
            const cells = [...table.querySelectorAll("td")];
            const em = parseFloat(getComputedStyle(cells[0]).fontSize);
            const line = parseFloat(getComputedStyle(cells[0]).lineHeight) || em * 1.6;
            return {
                narrowest: Math.min(...cells.map((c) => c.getBoundingClientRect().width)) / em,
                tallest: Math.max(...cells.map((c) => c.getBoundingClientRect().height)) / line,
                scrolls: table.scrollWidth > table.clientWidth,
                overflowX: getComputedStyle(table).overflowX,
                page: document.documentElement.scrollWidth - document.documentElement.clientWidth,
            };
        }"""
    )
    # "value 123" on one line: wider than a few characters, no taller than a line and its padding
    assert shape["narrowest"] > 3, shape
    assert shape["tallest"] < 2, shape
    assert shape["scrolls"] and shape["overflowX"] == "auto", shape
    assert shape["page"] <= 0, shape  # the table scrolls in its box, not the page
    screenshot(page, "timeline_wide_table")


# ---- the scripts' definition is the server's ---------------------------------------------------

SAMPLES = [
    "pay\u200dpal", "⚠\ufe0f", "⚠\ufe0f\ufe0f", "1\ufe0f\u20e3", "1\ufe0f", "👩\u200d💻",
    "👩🏽\u200d💻", "❤\ufe0f\u200d🔥", "a\u200d💻", "👩\u200da", "\u200d💻", "👩\u200d",
    "A\ufe00", "\U0001f600\U000e0100", "x" + "\u200b" * 5 + "y", "\u200b\u200c\u200b",
    "hi\U000e0068\U000e0069", "plain", "tab\tline\ncr\r",
]  # fmt: skip


def test_the_scripts_hide_nothing_the_server_shows(logged_in_page, people):
    stream = stream_with(people.owner, "x")
    page = logged_in_page(people.owner, path=f"/streams/{stream.pk}/")
    script = page.evaluate(
        """async (samples) => {
            const d = await import("/static/js/disguise.js");
            const hidden = [];
            const titles = {};
            for (let cp = 0; cp <= 0x10ffff; cp++) {
                if (cp >= 0xd800 && cp <= 0xdfff) continue;
                if (d.hasHidden(String.fromCodePoint(cp))) {
                    hidden.push(cp);
                    titles[cp] = d.charTitle(cp);
                }
            }
            const runs = samples.map((s) => d.hiddenRuns(s).map((r) => [r.start, r.cp, r.n]));
            return { hidden, titles, runs };
        }""",
        SAMPLES,
    )
    server = [
        cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF and disguise.hides(chr(cp))
    ]
    assert script["hidden"] == server
    assert {int(k): v for k, v in script["titles"].items()} == {
        cp: disguise.title(cp) for cp in server
    }

    def utf16(text, i):
        return len(text[:i].encode("utf-16-le")) // 2

    expected = [[[utf16(s, a), cp, b - a] for a, b, cp in disguise.runs(s)] for s in SAMPLES]
    assert script["runs"] == expected


def test_a_links_real_host_is_named_unless_its_text_is_it(logged_in_page, people):
    stream = stream_with(people.owner, "x")
    page = logged_in_page(people.owner, path=f"/streams/{stream.pk}/")
    cases = [
        ("https://example.org/auto", "https://example.org/auto", None),
        ("http://www.example.org", "www.example.org", None),
        ("mailto:someone@example.org", "someone@example.org", None),
        ("https://evil.example", "https://google.ml", ["evil.example", []]),
        ("https://example.org/docs", "docs", ["example.org", []]),
        ("https://example.org:8443/", "https://example.org/", ["example.org:8443", []]),
        (f"https://{IDN}", "https://\u0430pple.com", [IDN, ["Cyrillic"]]),
        ("https://xn--mnchen-3ya.de/", "https://münchen.de/", ["xn--mnchen-3ya.de", []]),
        # a Greek α before Latin letters is mixed, whatever the text says
        (
            "https://xn--fa-b9b.example/",
            "https://xn--fa-b9b.example/",
            ["xn--fa-b9b.example", ["Greek"]],
        ),
    ]
    got = page.evaluate(
        """async (cases) => {
            const d = await import("/static/js/disguise.js");
            return cases.map(([href, text]) => {
                const target = d.linkTarget(href, text);
                return target && [target.host, target.mixed];
            });
        }""",
        cases,
    )
    assert got == [expected for _, _, expected in cases]
    assert (
        page.evaluate(
            """async () => (await import("/static/js/disguise.js")).punycodeDecode("pple-43d")"""
        )
        == "\u0430pple"
    )
