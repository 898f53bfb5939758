"""Markdown the renderer cannot handle degrades to raw text, visibly; Markdown it can handle is
rendered in pieces that never cut a link, a code block or a table (static/js/markdown.js,
output.js), in real Chromium.

- A 5,000-level blockquote (markdown-it renders nothing beyond 100 levels) shows its text raw
  under "Shown as raw text: too deeply nested to format": on the timeline, in the playground
  (both the server's rendering, enhanced), and live (output.js's LiveOutput, as compare mode
  and the timeline's live view and replay use it).
- A one-line link of ~200 kB is never a link with a cut target: it is shown raw with its note,
  in the laid-out head and after "Show all"; a 5,000-character link is one whole link.
- A normal answer still formats, and a long one (a code block, a table and a paragraph each
  longer than a render piece) comes out as one code block, one table's rows and whole links.
"""

import json

import pytest
from playwright.sync_api import expect

from dashboard.models import Conversation, Turn
from streams.ingest.importer import import_capture

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DEEP = ">" * 5000 + " x"
DEEP_NOTE = "Shown as raw text: too deeply nested to format"
LONG_URL = "https://example.org/" + "a" * 199_900
LONG_LINK = f"[the link]({LONG_URL})"  # under 200,000 characters: the whole text is formatted
LONG_NOTE = "Shown as raw text: too long to format without a break"
MEDIUM_URL = "https://example.org/" + "b" * 5000
CODE_LINES = [f'print("line {i} of the code block")' for i in range(80)]
ROWS = [f"| row {i} | [cell {i}](https://example.org/cell/{i}) |" for i in range(120)]
SENTENCES = [
    f"Sentence {i} has [a link {i}](https://example.org/s/{i}) and *some emphasis {i}*."
    for i in range(60)
]
LONG_ANSWER = (
    "# A long answer\n\n"
    + " ".join(SENTENCES)
    + "\n\n```python\n"
    + "\n".join(CODE_LINES)
    + "\n```\n\nAfter the code.\n\n| name | link |\n|---|---|\n"
    + "\n".join(ROWS)
    + "\n\nAfter the table, "
    + f"[the medium link]({MEDIUM_URL}) ends it.\n"
)


def capture(text, size=1000):
    """A complete stream whose one message text is `text`, in deltas of `size` characters."""
    events = [
        {"type": "response.created", "response": {"id": "r1", "model": "m"}},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"type": "message", "id": "msg1", "role": "assistant", "content": []},
        },
        {
            "type": "response.content_part.added",
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "output_text", "text": ""},
        },
    ]
    for start in range(0, len(text), size):
        delta = text[start : start + size]
        events.append(
            {
                "type": "response.output_text.delta",
                "output_index": 0,
                "content_index": 0,
                "delta": delta,
            }
        )
    events.append(
        {
            "type": "response.output_text.done",
            "output_index": 0,
            "content_index": 0,
            "text": text,
        }
    )
    events.append({"type": "response.completed", "response": {"id": "r1", "status": "completed"}})
    for seq, event in enumerate(events):
        event["sequence_number"] = seq
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode()


def timeline(logged_in_page, user, text):
    (stream,) = import_capture(capture(text), "answer.sse", user=user)
    page = logged_in_page(user, path=f"/streams/{stream.pk}/")
    return page, "#output-items .part-output_text"


def playground(logged_in_page, user, text):
    (stream,) = import_capture(capture(text), "answer.sse", user=user)
    conversation = Conversation.objects.create(user=user, title="Budgets")
    Turn.objects.create(conversation=conversation, position=0, prompt="Hi", stream=stream)
    page = logged_in_page(user, path=f"/playground/{conversation.pk}/")
    return page, ".pg-turn:last-child .part-output_text"


# Feeds `text` to output.js's LiveOutput in deltas of `step` characters, `frames` at a time
# per animation frame, then ends it, as compare mode and the live timeline do; the part's
# element stays in the page (#live-probe) for the test to read.
LIVE = """async ({ text, step, batch }) => {
  const { LiveOutput } = await import("/static/js/output.js");
  const box = document.createElement("div");
  box.id = "live-probe";
  box.className = "items";
  document.querySelector("main").append(box);
  const output = new LiveOutput(box, { kinds: { message: "message" } });
  output.apply({ type: "response.output_item.added", output_index: 0, item: { type: "message" } });
  output.apply({ type: "response.content_part.added", output_index: 0, content_index: 0,
                 part: { type: "output_text" } });
  let n = 0;
  for (let at = 0; at < text.length; at += step) {
    output.apply({ type: "response.output_text.delta", output_index: 0, content_index: 0,
                   delta: text.slice(at, at + step) });
    if (++n % batch === 0) {
      output.flush();
      await new Promise((resolve) => requestAnimationFrame(resolve));
    }
  }
  output.finish();
  while (output.busy) await new Promise((resolve) => requestAnimationFrame(resolve));
}"""


def live(page, text, step=40, batch=5):
    page.evaluate(LIVE, {"text": text, "step": step, "batch": batch})
    return "#live-probe .part-output_text"


def shows_raw_with_note(page, part, text, note):
    """The Formatted view shows `text` as sent (not empty, not cut) under `note`, once."""
    body = page.locator(f"{part} .md-body")
    expect(body).to_be_visible()
    expect(body.locator(".md-note")).to_have_count(1)
    expect(body.locator(".md-note")).to_have_text(note)
    assert body.locator(".md-raw").evaluate("(e) => e.textContent") == text
    assert body.evaluate("(e) => e.innerText.trim().length") >= len(text.strip())


def test_a_deep_blockquote_shows_raw_with_a_note_on_the_timeline(
    logged_in_page, people, screenshot
):
    page, part = timeline(logged_in_page, people.owner, DEEP)
    shows_raw_with_note(page, part, DEEP, DEEP_NOTE)
    # "Raw" still shows the text as sent, without the note
    page.locator(f"{part} .md-toggle").click()
    expect(page.locator(f"{part} > .text")).to_have_text(DEEP)
    expect(page.locator(f"{part} .md-body")).to_be_hidden()
    page.locator(f"{part} .md-toggle").click()
    screenshot(page, "markdown-deep-timeline")
    # the live renderer (compare mode, the live timeline, replay) says the same
    shows_raw_with_note(page, live(page, DEEP), DEEP, DEEP_NOTE)
    assert page.errors == []


def test_a_deep_blockquote_shows_raw_with_a_note_in_the_playground(logged_in_page, people):
    page, part = playground(logged_in_page, people.owner, DEEP)
    shows_raw_with_note(page, part, DEEP, DEEP_NOTE)
    assert page.errors == []


def test_a_deep_quote_among_formatted_text_is_raw_alone(logged_in_page, people):
    text = "Before, **bold**.\n\n" + ">" * 300 + " x\n\nAfter, [a link](https://example.org/a).\n"
    page, part = timeline(logged_in_page, people.owner, text)
    body = page.locator(f"{part} .md-body")
    expect(body.locator("strong")).to_have_text("bold")
    expect(body.locator("a")).to_have_attribute("href", "https://example.org/a")
    expect(body.locator(".md-note")).to_have_text(DEEP_NOTE)
    assert body.locator(".md-raw").evaluate("(e) => e.textContent") == ">" * 300 + " x\n\n"


def all_hrefs(page, part):
    return page.locator(f"{part} .md-body a").evaluate_all(
        "(links) => links.map((a) => a.getAttribute('href'))"
    )


@pytest.mark.parametrize("where", [timeline, playground])
def test_a_200_kb_link_is_never_cut(logged_in_page, people, where):
    page, part = where(logged_in_page, people.owner, LONG_LINK)
    body = page.locator(f"{part} .md-body")
    # the laid-out head (20,000 characters): raw, with its note, no link with a cut target
    expect(body.locator(".md-note")).to_have_text(
        LONG_NOTE + " (a line or link of over 20 000 characters)"
    )
    assert body.locator(".md-raw").evaluate("(e) => e.textContent") == LONG_LINK[:20_000]
    assert all_hrefs(page, part) == []
    # "Show all": the whole text, still raw under one note
    page.locator(f"{part} button.show-rest").click()
    expect(body.locator(".md-raw")).to_have_text(LONG_LINK, timeout=10_000)
    expect(body.locator(".md-note")).to_have_count(1)
    assert all_hrefs(page, part) == []
    assert page.errors == []


def test_a_200_kb_link_streamed_live_is_never_cut(logged_in_page, people):
    page, _ = timeline(logged_in_page, people.owner, "Hello.")
    part = live(page, LONG_LINK, step=2000, batch=3)
    body = page.locator(f"{part} .md-body")
    expect(body.locator(".md-note")).to_have_count(1)
    assert body.locator(".md-raw").evaluate("(e) => e.textContent") == LONG_LINK[:20_000]
    assert all_hrefs(page, part) == []


def test_a_5000_character_link_is_one_whole_link(logged_in_page, people):
    text = f"See [the medium link]({MEDIUM_URL}) for more. " * 3
    page, part = timeline(logged_in_page, people.owner, text)
    assert all_hrefs(page, part) == [MEDIUM_URL] * 3
    assert page.locator(f"{part} .md-note").count() == 0
    for step in (40, 997):
        probe = live(page, text, step=step)
        assert all_hrefs(page, probe) == [MEDIUM_URL] * 3, step
        page.evaluate("document.getElementById('live-probe').remove()")


def check_long_answer(page, part):
    body = page.locator(f"{part} .md-body")
    expect(body.locator("h1")).to_have_text("A long answer")
    assert body.locator(".md-note").count() == 0
    # the code block: every line, once, in code (the pieces joined), and nothing after it
    code = body.locator("pre code").evaluate_all(
        "(codes) => codes.map((c) => c.textContent).join('')"
    )
    assert code == "\n".join(CODE_LINES) + "\n"
    assert body.locator("p", has_text="After the code.").count() == 1
    # the table: every row in a table body, none as a paragraph of pipes
    assert body.locator("tbody tr").count() == len(ROWS)
    assert body.locator("p", has_text="| row").count() == 0
    # every link whole: the paragraph's (cut at spaces, never inside one), the cells', the last
    hrefs = all_hrefs(page, part)
    sentences = [f"https://example.org/s/{i}" for i in range(60)]
    cells = [f"https://example.org/cell/{i}" for i in range(120)]
    assert hrefs == sentences + cells + [MEDIUM_URL]
    assert body.locator("em").count() == 60
    # and it reads as one text: the long paragraph was cut (at spaces), its halves run inline
    halves = body.locator(
        ".md-chunk.cut-after > p:last-child, .md-chunk.cut-before > p:first-child"
    )
    displays = halves.evaluate_all("(ps) => ps.map((p) => getComputedStyle(p).display)")
    assert displays and set(displays) == {"inline"}, displays


def test_a_long_answer_formats_whole_on_the_timeline_and_live(logged_in_page, people, screenshot):
    page, part = timeline(logged_in_page, people.owner, LONG_ANSWER)
    check_long_answer(page, part)
    screenshot(page, "markdown-long-answer-timeline")
    for step, batch in ((40, 5), (333, 1)):
        probe = live(page, LONG_ANSWER, step=step, batch=batch)
        check_long_answer(page, probe)
        page.evaluate("document.getElementById('live-probe').remove()")
    assert page.errors == []


def test_a_normal_answer_still_formats_in_the_playground(logged_in_page, people):
    text = "## Utrecht\n\nA **city** with a [canal](https://example.org/canal).\n\n- one\n- two\n"
    page, part = playground(logged_in_page, people.owner, text)
    body = page.locator(f"{part} .md-body")
    expect(body.locator("h2")).to_have_text("Utrecht")
    expect(body.locator("strong")).to_have_text("city")
    expect(body.locator("li")).to_have_count(2)
    assert all_hrefs(page, part) == ["https://example.org/canal"]
    assert body.locator(".md-note").count() == 0
    assert page.errors == []


def test_a_text_too_long_to_format_is_raw_whole_after_show_all(logged_in_page, people):
    text = "Utrecht is a **city**. " * 11_000  # 253,000 characters: over what is formatted
    page, part = timeline(logged_in_page, people.owner, text)
    body = page.locator(f"{part} .md-body")
    expect(body.locator(".md-note")).to_have_text(
        "Shown as raw text: too long to format (over 200 000 characters)"
    )
    assert body.locator(".md-raw").evaluate("(e) => e.textContent") == text[:20_000]
    page.locator(f"{part} button.show-rest").click()
    expect(body.locator(".md-raw")).to_have_text(text, timeout=10_000)
    expect(body.locator(".md-note")).to_have_count(1)
    assert body.locator("strong").count() == 0


# The page's clock, made to jump: every reading `skew` ms later than the one before, for the
# readings numbered in `slow` (all when it is null), while `text` renders live.
SLOW_CLOCK = """async ({ text, slow }) => {
  const real = performance.now.bind(performance);
  let readings = 0;
  let skew = 0;
  performance.now = () => {
    readings += 1;
    if (slow === null || slow.includes(readings)) skew += 300;
    return real() + skew;
  };
  try {
    await (LIVE)({ text, step: 40, batch: 1000 });
  } finally {
    performance.now = real;
  }
}""".replace("LIVE", LIVE, 1)


def test_a_piece_slow_to_render_twice_leaves_the_rest_raw(logged_in_page, people):
    text = "Some **bold** text.\n\nMore [text](https://example.org/t).\n"
    page, _ = timeline(logged_in_page, people.owner, "Hello.")
    # one slow reading (a pause of the page, not the input's fault): formatted all the same
    page.evaluate(SLOW_CLOCK, {"text": text, "slow": [2]})
    body = page.locator("#live-probe .md-body")
    expect(body.locator("strong")).to_have_text("bold")
    assert body.locator(".md-note").count() == 0
    page.evaluate("document.getElementById('live-probe').remove()")
    # slow every time: the rest of the text is shown raw, under its note
    page.evaluate(SLOW_CLOCK, {"text": text, "slow": None})
    expect(body.locator(".md-note")).to_have_text("Shown as raw text: took too long to format")
    assert text.endswith(body.locator(".md-raw").evaluate("(e) => e.textContent"))
    assert body.evaluate("(e) => e.innerText").count("bold") == 1


# Random Markdown (seeded: the same texts every run) with what a cut could break: links with
# spaces and parentheses in their text, target and title, bare URLs, autolinks, code spans,
# emphasis (also inside words: x*y), ordered-list-looking numbers, pipes; paragraphs of long
# lines, fenced code, tables, lists with nested items, quotes. Each is rendered whole by
# markdown-it and live in pieces by output.js; what each reads as must be the same.
PIECES_AS_WHOLE = """async ({ seed, docs }) => {
  const { markdownPiece } = await import("/static/js/markdown.js");
  const { LiveOutput } = await import("/static/js/output.js");
  let state = seed;
  const rnd = () => (state = (state * 1103515245 + 12345) % 2147483648) / 2147483648;
  const pick = (a) => a[Math.floor(rnd() * a.length)];
  const words = ["alpha", "Utrecht", "city", "and", "the", "5", "-", "2024.", "a_b", "x*y",
                 "(note)", "|"];
  const sentence = () => Array.from({ length: 5 + Math.floor(rnd() * 20) }, (_, i) => {
    const r = rnd();
    if (r < 0.06) return `[link ${i} text](https://example.org/p/${i}_(x) "title ${i}")`;
    if (r < 0.1) return `https://example.org/bare/${i}?q=${i}`;
    if (r < 0.14) return `\\`code span ${i}\\``;
    if (r < 0.18) return `**bold ${i} words**`;
    if (r < 0.21) return `*em ${i} words*`;
    if (r < 0.23) return `<https://auto.example.org/${i}>`;
    return pick(words);
  }).join(" ");
  const lines = (n, line) => Array.from({ length: n }, (_, i) => line(i)).join("\\n");
  const block = () => {
    const r = rnd();
    const n = 2 + Math.floor(rnd() * 40);
    const joint = rnd() < 0.5 ? " " : "\\n";
    if (r < 0.35) return lines(1 + Math.floor(rnd() * 12), sentence).replace(/\\n/g, joint);
    const code = (i) => `const v${i} = "${pick(words)} [not](a link)";`;
    if (r < 0.5) return "```js\\n" + lines(n, code) + "\\n```";
    const row = (i) => `| ${pick(words)} ${i} | [l${i}](https://t.example.org/${i}) |`;
    if (r < 0.62) return "| a | b |\\n|---|:-:|\\n" + lines(n, row);
    const item = (i) => `${i % 3 === 2 ? "  " : ""}- item ${i} ${sentence()}`;
    if (r < 0.8) return lines(n / 2, item);
    if (r < 0.9) return lines(n / 4, () => `> ${sentence()}`);
    return `## Heading ${pick(words)}`;
  };
  const read = (root) => ({
    links: [...root.querySelectorAll("a")].map((a) => `${a.getAttribute("href")} ${a.textContent}`),
    code: [...root.querySelectorAll("pre code")].map((c) => c.textContent).join(""),
    cells: [...root.querySelectorAll("tbody td")].map((c) => c.textContent),
    strong: root.querySelectorAll("strong").length,
    em: root.querySelectorAll("em").length,
    nested: root.querySelectorAll("li li, blockquote blockquote").length,
    text: root.innerText.replace(/\\s+/g, " ").trim(),
  });
  const differences = [];
  for (let d = 0; d < docs; d += 1) {
    let text = "";
    while (!text || text.length > 19000) {
      text = Array.from({ length: 8 + Math.floor(rnd() * 12) }, block).join("\\n\\n") + "\\n";
    }
    const whole = document.createElement("div");
    whole.className = "md-body";
    whole.append(markdownPiece(text).fragment);
    document.querySelector("main").append(whole);
    const box = document.createElement("div");
    document.querySelector("main").append(box);
    const output = new LiveOutput(box, { kinds: { message: "message" } });
    output.apply({ type: "response.output_item.added", output_index: 0,
                   item: { type: "message" } });
    output.apply({ type: "response.content_part.added", output_index: 0, content_index: 0,
                   part: { type: "output_text" } });
    const step = 1 + Math.floor(rnd() * 200);
    for (let at = 0; at < text.length; at += step) {
      output.apply({ type: "response.output_text.delta", output_index: 0, content_index: 0,
                     delta: text.slice(at, at + step) });
      if (rnd() < 0.3) output.flush();
    }
    output.finish();
    while (output.busy) await new Promise((resolve) => requestAnimationFrame(resolve));
    const body = box.querySelector(".md-body");
    const [a, b] = [read(whole), read(body)];
    const pieces = body.querySelectorAll(".md-chunk").length;
    for (const key of Object.keys(a)) {
      if (JSON.stringify(a[key]) !== JSON.stringify(b[key])) differences.push({ d, key, pieces });
    }
    if (body.querySelector(".md-note")) differences.push({ d, key: "note" });
    if (pieces < 5) differences.push({ d, key: "too few pieces", pieces });
    whole.remove();
    box.remove();
  }
  return differences;
}"""


@pytest.mark.parametrize("seed", [7, 999])
def test_random_markdown_renders_in_pieces_as_it_does_whole(logged_in_page, people, seed):
    page, _ = timeline(logged_in_page, people.owner, "Hello.")
    assert page.evaluate(PIECES_AS_WHOLE, {"seed": seed, "docs": 12}) == []
    assert page.errors == []
