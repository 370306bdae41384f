"""What a redaction template's rules match, and the spellings a value may hide in: the one piece both passes share.

A PDF holds the same characters in many spellings. Before anything is matched, text is normalized: XML and HTML
character references and entities (`&#64;`, `&amp;`) are resolved, percent-encoding (`%40`, in URIs) is decoded,
Unicode is put in NFKC form (ligatures such as `ﬁ` become `fi`, full-width digits plain ones) and invisible
characters (soft hyphens, zero-width spaces and joiners, word joiners, byte-order marks) are dropped. Bytes are read
every way a writer may have meant them: UTF-16 with either byte-order mark, UTF-8, PDFDocEncoding and Latin-1.
A value matches ignoring whitespace and case; a rule matches the normalized text, across runs and lines (in a script
written without spaces, across the gaps and line ends between its characters).
A PDF name is read for what it spells of the document: a name the PDF specification defines spells nothing
(pdfsyntax.SPEC_NAMES).

Rules are RE2 expressions (google-re2): matching takes time linear in the text, whatever the pattern, so no
uploader-controlled text can make a rule run for minutes. RE2 has no backreferences or lookaround; a template that
uses them is refused when it is submitted. RE2's `\\w`, `\\d` and `\\b` are ASCII; `\\pL` and `\\pN` are letters and
digits of any script.
"""

from __future__ import annotations

import html
import re
import unicodedata
import urllib.parse
from dataclasses import dataclass

import re2
from pypdf._codecs import _pdfdoc_encoding

from evidence_pipeline.documents.pdfsyntax import SPEC_NAMES

_RE2 = re2.Options()
_RE2.log_errors = False  # a refused template's pattern is the caller's error, not a log line
_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u180e\u200b\u200c\u200d\u2060\ufeff"), None)
_SPACE = re.compile(r"\s+")
HYPHENS = "-\u2010\u2011"  # what a line may end in where a word or value wraps: hyphen-minus, hyphen, non-breaking
# A line that ends in a hyphen, and the line break after it (one pass over the text: no nested repetition)
_WRAP = re.compile(rf"([{re.escape(HYPHENS)}])[ \t]*(?:\r\n?|\n)[ \t]*")
# Han, kana and their punctuation and full-width forms: scripts written without spaces, read on across a gap or a
# line's end (a line or a column of Japanese wraps in mid-word)
_SCRIPTS = "\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
UNSPACED = re.compile(f"[{_SCRIPTS}]")
_UNSPACED_BREAK = re.compile(f"(?<=[{_SCRIPTS}])\\s+(?=[{_SCRIPTS}])")
_PDFDOC = str.maketrans({i: c for i, c in enumerate(_pdfdoc_encoding) if c != "\x00"})


def compile_pattern(pattern: str):
    """The pattern as RE2 compiles it; re2.error when it uses what RE2 cannot bound."""
    return re2.compile(pattern, _RE2)


def normalize(text: str) -> str:
    """The text as a reader sees it: references resolved, percent-decoded, NFKC, invisible characters dropped."""
    if "&" in text:
        text = html.unescape(text)
    if "%" in text:
        text = urllib.parse.unquote(text)
    return normalize_glyphs(text)


def normalize_glyphs(text: str) -> str:
    """What a page's glyphs spell: NFKC, invisible characters dropped (a page's text is not escaped)."""
    if text.isascii():  # NFKC leaves ASCII as it is, and no invisible character is ASCII
        return text
    return unicodedata.normalize("NFKC", text).translate(_INVISIBLE)


def decodings(data: bytes) -> list[str]:
    """The bytes as text, every way a PDF writer may have meant them."""
    forms = []
    if data[:2] in (b"\xfe\xff", b"\xff\xfe"):
        forms.append(data[2:].decode("utf-16-be" if data[:2] == b"\xfe\xff" else "utf-16-le", errors="replace"))
    elif b"\x00" in data and len(data) % 2 == 0:  # UTF-16 without a mark: the NULs give it away
        forms += [data.decode("utf-16-be", errors="replace"), data.decode("utf-16-le", errors="replace")]
    if data[:3] == b"\xef\xbb\xbf":
        data = data[3:]
    forms.append(data.decode("utf-8", errors="replace"))
    if any(byte > 0x7F for byte in data):
        latin = data.decode("latin-1")
        forms += [latin, latin.translate(_PDFDOC)]
    return forms


def _unescaped(name: bytes) -> bytes:
    return re.sub(rb"#([0-9A-Fa-f]{2})", lambda m: bytes([int(m[1], 16)]), name)


def name_str(name) -> str:
    """A pikepdf Name as pikepdf gives a dictionary's keys: its bytes read as UTF-8, a byte that is not kept as a lone
    surrogate. ``str()`` of a Name raises on such bytes, which real files hold (a Shift-JIS font name)."""
    return _unescaped(name.unparse()).decode("utf-8", "surrogateescape")


def name_text(name: str) -> str:
    """What a PDF name spells of a document: without its slash, #xx escapes decoded (as bytes, UTF-8 where they
    are); nothing for a name the PDF specification defines as a key or value (``/Contents``, ``/Columns``), which
    every PDF may hold and which says nothing of the document (a target word equal to one is no reason to delete the
    page's contents, nor to refuse the derivative)."""
    raw = _unescaped(name.removeprefix("/").encode("utf-8", "surrogateescape"))
    text = raw.decode("utf-8", errors="replace")
    return "" if text in SPEC_NAMES else text


def wrapped(text: str) -> tuple[str, ...]:
    """The text with each line that ends in a hyphen joined to the next, as a reader reads a wrapped line: the
    hyphen kept (a value wrapped after its own hyphen: ``123-45-`` then ``6789``) and dropped (a word hyphenated
    where it wraps: ``exam-`` then ``ple.net``); none when no line ends in one."""
    if not _WRAP.search(text):
        return ()
    return _WRAP.sub(r"\1", text), _WRAP.sub("", text)


def unspaced(text: str) -> tuple[str, ...]:
    """The text with the white space between two characters of a script written without spaces dropped, as a
    reader reads on across it (a column of vertical Japanese into the next); none when there is none."""
    if text.isascii():
        return ()
    joined = _UNSPACED_BREAK.sub("", text)
    return (joined,) if joined != text else ()


def text_views(text: str) -> set[str]:
    """The text as a rule reads it, in both passes: as written, normalized, and normalized with its wrapped lines
    joined (``wrapped``) and a script written without spaces read on (``unspaced``)."""
    normalized = normalize(text)
    return {text, normalized, *wrapped(normalized), *unspaced(normalized)}


def flat(text: str) -> str:
    return _SPACE.sub("", text).casefold()


@dataclass
class Rules:
    patterns: list[tuple[str, object, int]]  # (label, compiled RE2 pattern, the group whose text is the value)
    fields: dict[str, str]  # fully qualified field name -> label
    regions: dict[int, list[tuple[str, tuple[float, float, float, float]]]]  # page number -> (label, rect)

    @classmethod
    def of(cls, template: dict) -> Rules:
        rules = cls([], {}, {})
        for rule in template["rules"]:
            if "pattern" in rule:
                compiled = compile_pattern(rule["pattern"])
                rules.patterns.append((rule["label"], compiled, compiled.groupindex.get("value", 0)))
            elif "field" in rule:
                rules.fields[rule["field"]] = rule["label"]
            else:
                region = rule["region"]
                rules.regions.setdefault(region["page"], []).append((rule["label"], tuple(region["rect"])))
        return rules

    def matches(self, text: str):
        """(label, start, end, value) of every pattern match in ``text`` as given: the group ``value`` when the
        pattern names one."""
        for label, pattern, group in self.patterns:
            for match in pattern.finditer(text):
                if match.group(group) and match.group(group).strip():
                    yield label, match.start(group), match.end(group), match.group(group)


@dataclass
class Search:
    """Values and rules looked for in text of any spelling."""

    rules: Rules
    values: list[str]

    def __post_init__(self):
        self._flat = [flat(value) for value in self.values if flat(value)]

    def holds(self, text: str) -> bool:
        """Whether the text, in any of its views, holds a value or a rule's match."""
        for view in text_views(text):
            squeezed = flat(view)
            if any(value in squeezed for value in self._flat) or any(True for _ in self.rules.matches(view)):
                return True
        return False

    def holds_bytes(self, data: bytes) -> bool:
        return any(self.holds(text) for text in decodings(data))
