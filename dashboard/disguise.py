"""Text that disguises itself, shown for what it is (issue 42; docs/security.md, "Text that
disguises itself"): the characters a page never leaves invisible, for the server's pages.

A right-to-left override makes `factuur\u202efdp.exe` read "factuurexe.pdf"; zero-width and
other default-ignorable characters hide inside a word or smuggle whole texts (tag characters
spell ASCII nobody sees); C0/C1 controls do either. Where the pages show recorded text (the
output's raw view, an event's data, its summary, a finding's expected/got), each such character
is drawn as a marker, ``⟨U+202E⟩``, named in its title, and a note says the text holds some.
Only the display changes: what is stored, exported or copied keeps the original characters
(the marker carries the code point; static/js/disguise.js puts it back on copy).

This is the server's definition; static/js/disguise.js is the scripts' (the Markdown view,
the live output). tests/e2e/test_disguise_e2e.py holds the two to the same code points, names
and rules, so the raw view and the rendered one never disagree about a character.

What counts (`RANGES`): every Default_Ignorable_Code_Point of Unicode (bidi marks and
overrides, zero-width characters, the invisible operators, Hangul fillers, variation
selectors, tag characters, and the reserved ranges set aside for more), the interlinear
annotation controls, and the C0/C1 controls except tab, line feed and carriage return (shown
as what they are already). Two uses are left alone because marking them would mark every
emoji (`_in_emoji`): one VS15/VS16 right after a pictograph (⚠️, ❤️) or in a keycap (1️⃣), and
a zero-width joiner between two pictographs (👩‍💻). A second selector, a joiner elsewhere
(inside a word) and every other variation selector are marked. A run of one character is
one marker with its count (``⟨U+200B ×40⟩``), so a text of nothing but hidden characters
costs a marker per run, not per character.
"""

import re
import unicodedata

from django.utils.html import escape
from django.utils.safestring import SafeData, mark_safe

# Inclusive ranges of code points drawn as markers (static/js/disguise.js RANGES: the same).
RANGES = (
    (0x0000, 0x0008),  # C0 controls (tab, line feed and carriage return are shown as they are)
    (0x000B, 0x000C),
    (0x000E, 0x001F),
    (0x007F, 0x009F),  # DEL and the C1 controls
    (0x00AD, 0x00AD),  # soft hyphen
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x061C, 0x061C),  # Arabic letter mark
    (0x115F, 0x1160),  # Hangul fillers
    (0x17B4, 0x17B5),  # Khmer inherent vowels
    (0x180B, 0x180F),  # Mongolian variation selectors and vowel separator
    (0x200B, 0x200F),  # zero-width space, (non-)joiner, LRM, RLM
    (0x202A, 0x202E),  # bidi embeddings and overrides
    (0x2060, 0x206F),  # word joiner, invisible operators, bidi isolates, deprecated formats
    (0x3164, 0x3164),  # Hangul filler
    (0xFE00, 0xFE0F),  # variation selectors 1-16
    (0xFEFF, 0xFEFF),  # zero-width no-break space (byte order mark)
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler
    (0xFFF0, 0xFFFB),  # reserved, and the interlinear annotation controls
    (0x1BCA0, 0x1BCA3),  # shorthand format controls
    (0x1D173, 0x1D17A),  # musical formatting
    (0xE0000, 0xE0FFF),  # tag characters, variation selectors 17-256, reserved
)

_C0 = (
    "NUL SOH STX ETX EOT ENQ ACK BEL BS HT LF VT FF CR SO SI "
    "DLE DC1 DC2 DC3 DC4 NAK SYN ETB CAN EM SUB ESC FS GS RS US"
).split()
_C1 = (
    "PAD HOP BPH NBH IND NEL SSA ESA HTS HTJ VTS PLD PLU RI SS2 SS3 "
    "DCS PU1 PU2 STS CCH MW SPA EPA SOS SGCI SCI CSI ST OSC PM APC"
).split()
# Unicode's names of the single characters (tests/dashboard/test_disguise.py checks them against
# unicodedata); controls, tags and variation selectors are named by rule in `name`.
NAMES = {
    0x00AD: "SOFT HYPHEN",
    0x034F: "COMBINING GRAPHEME JOINER",
    0x061C: "ARABIC LETTER MARK",
    0x115F: "HANGUL CHOSEONG FILLER",
    0x1160: "HANGUL JUNGSEONG FILLER",
    0x17B4: "KHMER VOWEL INHERENT AQ",
    0x17B5: "KHMER VOWEL INHERENT AA",
    0x180B: "MONGOLIAN FREE VARIATION SELECTOR ONE",
    0x180C: "MONGOLIAN FREE VARIATION SELECTOR TWO",
    0x180D: "MONGOLIAN FREE VARIATION SELECTOR THREE",
    0x180E: "MONGOLIAN VOWEL SEPARATOR",
    0x180F: "MONGOLIAN FREE VARIATION SELECTOR FOUR",
    0x200B: "ZERO WIDTH SPACE",
    0x200C: "ZERO WIDTH NON-JOINER",
    0x200D: "ZERO WIDTH JOINER",
    0x200E: "LEFT-TO-RIGHT MARK",
    0x200F: "RIGHT-TO-LEFT MARK",
    0x202A: "LEFT-TO-RIGHT EMBEDDING",
    0x202B: "RIGHT-TO-LEFT EMBEDDING",
    0x202C: "POP DIRECTIONAL FORMATTING",
    0x202D: "LEFT-TO-RIGHT OVERRIDE",
    0x202E: "RIGHT-TO-LEFT OVERRIDE",
    0x2060: "WORD JOINER",
    0x2061: "FUNCTION APPLICATION",
    0x2062: "INVISIBLE TIMES",
    0x2063: "INVISIBLE SEPARATOR",
    0x2064: "INVISIBLE PLUS",
    0x2066: "LEFT-TO-RIGHT ISOLATE",
    0x2067: "RIGHT-TO-LEFT ISOLATE",
    0x2068: "FIRST STRONG ISOLATE",
    0x2069: "POP DIRECTIONAL ISOLATE",
    0x206A: "INHIBIT SYMMETRIC SWAPPING",
    0x206B: "ACTIVATE SYMMETRIC SWAPPING",
    0x206C: "INHIBIT ARABIC FORM SHAPING",
    0x206D: "ACTIVATE ARABIC FORM SHAPING",
    0x206E: "NATIONAL DIGIT SHAPES",
    0x206F: "NOMINAL DIGIT SHAPES",
    0x3164: "HANGUL FILLER",
    0xFEFF: "ZERO WIDTH NO-BREAK SPACE",
    0xFFA0: "HALFWIDTH HANGUL FILLER",
    0xFFF9: "INTERLINEAR ANNOTATION ANCHOR",
    0xFFFA: "INTERLINEAR ANNOTATION SEPARATOR",
    0xFFFB: "INTERLINEAR ANNOTATION TERMINATOR",
    0x1BCA0: "SHORTHAND FORMAT LETTER OVERLAP",
    0x1BCA1: "SHORTHAND FORMAT CONTINUING OVERLAP",
    0x1BCA2: "SHORTHAND FORMAT DOWN STEP",
    0x1BCA3: "SHORTHAND FORMAT UP STEP",
    0x1D173: "MUSICAL SYMBOL BEGIN BEAM",
    0x1D174: "MUSICAL SYMBOL END BEAM",
    0x1D175: "MUSICAL SYMBOL BEGIN TIE",
    0x1D176: "MUSICAL SYMBOL END TIE",
    0x1D177: "MUSICAL SYMBOL BEGIN SLUR",
    0x1D178: "MUSICAL SYMBOL END SLUR",
    0x1D179: "MUSICAL SYMBOL BEGIN PHRASE",
    0x1D17A: "MUSICAL SYMBOL END PHRASE",
    0xE0001: "LANGUAGE TAG",
    0xE007F: "CANCEL TAG",
}

_TAG = re.compile(r"(<[^>]*>)")
_PATTERN = re.compile("[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in RANGES) + "]")
ZWJ = 0x200D
KEYCAP = "\u20e3"
KEYCAP_BASES = "#*0123456789"
_PRESENTATION = (0xFE0E, 0xFE0F)  # text and emoji presentation selectors
_SKIN_TONES = range(0x1F3FB, 0x1F400)


def name(cp):
    """The character's name as its marker's title gives it: Unicode's, or by rule."""
    if cp in NAMES:
        return NAMES[cp]
    if cp < 0x20:
        return f"CONTROL CHARACTER {_C0[cp]}"
    if cp == 0x7F:
        return "CONTROL CHARACTER DEL"
    if 0x80 <= cp <= 0x9F:
        return f"CONTROL CHARACTER {_C1[cp - 0x80]}"
    if 0xFE00 <= cp <= 0xFE0F:
        return f"VARIATION SELECTOR-{cp - 0xFE00 + 1}"
    if 0xE0100 <= cp <= 0xE01EF:
        return f"VARIATION SELECTOR-{cp - 0xE0100 + 17}"
    if 0xE0020 <= cp <= 0xE007E:
        # what a tag character spells is the point of smuggling it: the title says it
        return f"TAG ‘{chr(cp - 0xE0000)}’"
    return "RESERVED INVISIBLE CHARACTER"


def _pictograph(ch):
    # Emoji are "other symbols" (So); a property as plain as this one reads the same in
    # Python's unicodedata and in the browser's regular expressions (\p{So}).
    return unicodedata.category(ch) == "So"


def _in_emoji(text, i):
    """Whether the character at `i` is part of an emoji sequence, not hidden in one: a
    presentation selector right after a pictograph or in a keycap, a joiner between
    pictographs (the one before it may wear a selector or a skin tone)."""
    cp = ord(text[i])
    before = text[i - 1] if i > 0 else ""
    after = text[i + 1] if i + 1 < len(text) else ""
    if cp in _PRESENTATION:
        if before and _pictograph(before):
            return True
        return before != "" and before in KEYCAP_BASES and after == KEYCAP
    if cp == ZWJ:
        if not after or not _pictograph(after):
            return False
        if before and (ord(before) == 0xFE0F or ord(before) in _SKIN_TONES):
            before = text[i - 2] if i > 1 else ""
        return bool(before) and _pictograph(before)
    return False


def runs(text):
    """The hidden characters of `text` as runs: (start, end, code point), a run being one
    character repeated."""
    found = []
    for match in _PATTERN.finditer(text):
        i = match.start()
        if _in_emoji(text, i):
            continue
        cp = ord(text[i])
        if found and found[-1][1] == i and found[-1][2] == cp:
            found[-1] = (found[-1][0], i + 1, cp)
        else:
            found.append((i, i + 1, cp))
    return found


def hides(text):
    """Whether `text` holds a character `reveal` draws as a marker."""
    return any(not _in_emoji(text, m.start()) for m in _PATTERN.finditer(text))


def title(cp, n=1):
    """A marker's title: "U+202E RIGHT-TO-LEFT OVERRIDE", "… ×3" for a run."""
    return f"U+{cp:04X} {name(cp)}" + (f" ×{n}" if n > 1 else "")


def label(cp, n=1):
    """A marker's text: "⟨U+202E⟩", "⟨U+200B ×3⟩" for a run."""
    return f"⟨U+{cp:04X}" + (f" ×{n}" if n > 1 else "") + "⟩"


def marker_html(cp, n=1):
    """One marker (static/js/disguise.js `marker` builds the same element)."""
    count = f' data-n="{n}"' if n > 1 else ""
    return (
        f'<span class="hidden-char" role="img" data-cp="{cp:04X}"{count} '
        f'title="{escape(title(cp, n))}">{label(cp, n)}</span>'
    )


def reveal_html(text):
    """`text` escaped for HTML, each hidden character (run) drawn as a marker. HTML already
    made safe (a search snippet with its <mark>s) is not escaped again: its text between tags
    gets the markers, its tags stay as they are."""
    if isinstance(text, SafeData):
        pieces = _TAG.split(text)
        # odd pieces are tags; the text between them is escaped already: only markers are added
        return mark_safe("".join(p if i % 2 else _marked(p, str) for i, p in enumerate(pieces)))
    return mark_safe(_marked(text, escape))  # `_marked` escapes every piece of the text


def _marked(text, quote):
    """`text` with its hidden runs as markers, the text between them passed through `quote`."""
    found = runs(text)
    if not found:
        return quote(text)
    out = []
    at = 0
    for start, end, cp in found:
        out.append(quote(text[at:start]))
        out.append(marker_html(cp, end - start))
        at = end
    out.append(quote(text[at:]))
    return "".join(out)


def holds_hidden(value):
    """Whether any text in `value` (a string, or the strings inside dicts, lists and tuples
    of them: an output item, an event's detail) holds a hidden character."""
    if isinstance(value, str):
        return hides(value)
    if isinstance(value, dict):
        return any(holds_hidden(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(holds_hidden(v) for v in value)
    return False
