"""`redact`: a rental application's derivative with the pinned template's matches removed, not covered.

First pass (this module, pikepdf). Find every value the template's rules match, after normalization (matching.py):
in each page's text, read in drawing order and in reading order; in the text of every image, read by OCR (ocr.py);
in the content streams the page draws otherwise (soft-mask groups, patterns, Type3 glyph procedures); in every
string and every text stream reachable in the file (annotations and their actions, form fields, outlines,
the names tree, page labels, optional-content names, marked-content and structure-tree text, document information,
every XMP packet, JavaScript); in the glyphs of every annotation's and widget's appearance streams. Then remove each
found value everywhere it occurs:

- page content (form XObjects included, and what the page draws otherwise: soft-mask groups, tiling patterns'
  cells, Type3 glyph procedures): the glyphs, from the text-showing operators; the strings of inline
  marked-content properties (/ActualText, /Alt, /E) that hold one; a resource named after one is renamed, in its
  resources and in every content stream that names it;
- image pixels: OCR word boxes that hold a value, and region rules' areas, painted black in the image itself;
- form fields that hold one (or a rule names): value, default value and appearance (the widget is hidden);
- annotations that hold one anywhere (their text, actions, appearance), with their popups;
- any other string or text stream still holding one: an action holding one is removed whole (a link is dropped,
  never rewritten to point elsewhere), a name-tree entry is removed, a metadata stream or information entry is
  removed, a bookmark title becomes `[redacted]`, any other string `[redacted]`, any other text stream empty
  (content streams are judged as the second pass judges them: by their strings, names and comments, never their
  numbers, so a glyph procedure whose coordinates spell a number is kept);
- a font program's names and strings (its maker's notice and description: pdfsyntax.font_spans) that hold a value:
  blanked in place, the program keeping its layout;
- always: embedded and associated files, page thumbnails (pictures of the original page), and pages outside the
  page tree (a destination's page after its page was deleted: no reader shows it, its content stays in the file);
- last, what the page still shows, in every view a reader can bring up, as the second pass reads them
  (reader_views: every optional-content layer, print-only annotations, each annotation's rollover, down and
  unselected appearances, the media box beyond the crop box; tinted and coloured areas read by their contrast):
  each page of the result is rendered (pdfium, annotations and form appearances drawn) and what its trusted text
  layer does not explain is read by OCR at any angle (ocr.shown_pages), and its text as pdfium reads it from its
  fonts (what the walk reads as U+FFFD) is matched too; where a found value or a rule's match shows, the region is
  burned in, not covered (``_burn``): what the page draws across it (glyphs, paths, images, form placements,
  shadings, annotations and widgets, whatever their optional-content marking; cut.py) is cut out and the
  rendering of the area they covered, the regions painted black, is drawn in their place, so no object under a box
  holds the value; the rest of the page keeps its objects and its text layer. Beyond the crop box what is drawn
  across a region is cut out only; an annotation whose alternate appearance shows a value keeps only the one it
  shows (``_strip_alternates``). A page whose cut still shows ink in
  a region is burned whole (replaced by its rendering; its text layer goes). A value found only there is removed
  from the objects too (the removal above is done again, from the input, with every value); a widget whose
  appearance still holds a value as bytes (drawn clipped, or where OCR did not read it) loses its field; then a
  content stream that nothing draws any more (a form XObject only a custom key reaches, an appearance its widget
  lost) and that still carries a value is emptied.

A page that, rendered, the OCR engine cannot read with confidence, and that no region rule covers, is refused: what
cannot be read cannot be promised removed. Each removed area on a page gets a black mark drawn in the page content. The
derivative is written whole, as one revision (qpdf writes only the objects still referenced: earlier revisions are
gone), with a deterministic /ID, so the same input, template version and OCR engine give the same bytes.

The second pass (`redaction_check`) verifies the written file independently before anything is published.

Over 400 lines because the first pass covers every place in a PDF that can hold a string; its scope is one list, and
splitting it would hide a place.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import math
import re
import zlib
from array import array
from collections import Counter
from dataclasses import dataclass, field

import numpy
import pikepdf
import pypdfium2
import pypdfium2.raw as pdfium_c
from PIL import Image, ImageDraw

from evidence_pipeline.documents import budgets, cut, ocr, pdfsyntax, pdftext, reader_views, templates
from evidence_pipeline.documents.gate import LIMITS
from evidence_pipeline.documents.matching import (
    HYPHENS,
    UNSPACED,
    Rules,
    Search,
    compile_pattern,
    decodings,
    name_str,
    name_text,
    normalize,
    normalize_glyphs,
    text_views,
)
from evidence_pipeline.documents.pdfwalk import first_visit
from evidence_pipeline.documents.redaction_check import content_holds, verify_derivative
from evidence_pipeline.documents.registry import (
    ACTIVE_CONTENT_OPTION,
    Operation,
    ProcessorInput,
    ProcessorResult,
    register,
)
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.monthly.validate import PDFIUM_LOCK
from evidence_pipeline.signing.dsse import canonical_json

REPORT = "redaction.json"
MARK_PADDING = 1.0  # points around a removed glyph's box
WORD_PADDING = 2  # pixels around a word OCR found
_BOUNCE = 0.9  # of a glyph's font size: glyphs raised less are on their line (lines set solid, 1.0 apart, are not)
_STRIP = 256  # rows of a rendering looked at at once
REDACTED = "[redacted]"
# /S of an action dictionary (PDF 2.0, 12.6.4): a dictionary with one of these is an action, removed whole
ACTIONS = frozenset(
    {
        "/GoTo",
        "/GoToR",
        "/GoToE",
        "/GoToDp",
        "/Launch",
        "/Thread",
        "/URI",
        "/Sound",
        "/Movie",
        "/Hide",
        "/Named",
        "/SubmitForm",
        "/ResetForm",
        "/ImportData",
        "/SetOCGState",
        "/Rendition",
        "/Trans",
        "/GoTo3DView",
        "/JavaScript",
        "/RichMediaExecute",
    }
)
# What links an annotation to the rest of the document rather than to what it says
_ANNOTATION_LINKS = frozenset({"/P", "/Parent", "/Popup", "/IRT"})
# Streams whose decoded bytes are not text a rule reads: fonts, colour profiles, functions, CMaps (images are OCR'd,
# page content is walked glyph by glyph)
_FONT_PROGRAMS = frozenset({"/FontFile", "/FontFile2", "/FontFile3"})
_BINARY_STREAM_KEYS = _FONT_PROGRAMS | {"/ToUnicode", "/Thumb", "/SMask"}
_BINARY_STREAM_MARKS = ("/PatternType", "/FunctionType", "/ShadingType", "/Length1", "/Length2", "/N")


def output_key(document_id: str, input_sha256: str, template_version: str) -> str:
    """The derivative's identity: the same application, bytes and template version converge on it."""
    return hashlib.sha256(f"{document_id}:{input_sha256}:{template_version}".encode()).hexdigest()


@dataclass
class Finding:
    """What a first pass found: the values to remove (label each), what was removed where, and per page the marks."""

    values: dict[str, str] = field(default_factory=dict)  # value -> label
    counts: Counter = field(default_factory=Counter)  # place (or a region rule's label) -> removed items
    marks: dict[int, list[tuple[float, float, float, float]]] = field(default_factory=dict)  # page index -> boxes
    readings: dict[tuple[int, int], ocr.Reading] = field(default_factory=dict)  # image objgen -> its OCR
    pages_read: int = 0  # rendered pages read by OCR
    source: bytes = b""  # the input document: pdfium decodes, where a page draws it, an image pikepdf cannot
    # page number -> (its walk's text and glyph count, its views) from the finding walk, for the removal walk
    views: dict[int, tuple[tuple[str, int], list[_View]]] = field(default_factory=dict)

    def page_views(self, number: int, page: pdftext.Page) -> list[_View]:
        """The page's views as the finding walk built them, when the removal walk reads the same glyphs (a form
        XObject it shares with a page rewritten before it may have lost some); else built again."""
        walked, views = self.views.pop(number, (None, None))
        return views if walked == (page.text, len(page.glyphs)) else _page_views(page)

    def add(self, label: str, value: str) -> None:
        value = " ".join(normalize_glyphs(value).split())
        if value and value not in self.values:
            self.values[value] = label

    @property
    def removed(self) -> Counter:
        """Values found by label, and what was removed by place."""
        return Counter(self.values.values()) + self.counts

    def mark(self, page: int, rect) -> None:
        x0, y0, x1, y1 = (float(v) for v in rect)
        self.marks.setdefault(page, []).append(
            (
                min(x0, x1) - MARK_PADDING,
                min(y0, y1) - MARK_PADDING,
                max(x0, x1) + MARK_PADDING,
                max(y0, y1) + MARK_PADDING,
            )
        )


def redact_document(inputs: list[ProcessorInput], options: dict[str, str], pinned: dict) -> ProcessorResult:
    """The real redactor: remove, then mark."""
    return run(inputs, pinned, remove=True)


def run(inputs: list[ProcessorInput], pinned: dict, remove: bool) -> ProcessorResult:
    """Find, remove (unless ``remove`` is False: the overlay-only double the tests keep to show that the second
    pass catches it) and mark, reading in the pinned template's OCR languages."""
    template, vid = pinned.get("template"), pinned.get("template_version")
    if not isinstance(template, dict) or templates.version_id(template) != vid:
        raise EvidenceError(ReasonCode.TEMPLATE_NOT_IN_EFFECT, "the job's pinned template is not the version it names")
    languages = templates.languages(template)
    with ocr.reading_in(languages):
        return _run(inputs, template, vid, languages, remove)


def _run(inputs: list[ProcessorInput], template: dict, vid: str, languages: tuple, remove: bool) -> ProcessorResult:
    (document,) = inputs
    rules = Rules.of(template)
    document.file.seek(0)
    finding = Finding(source=document.file.read())
    with readable(), pikepdf.open(io.BytesIO(finding.source)) as pdf:
        detached = _detach_pages_outside_the_tree(pdf)
        find(pdf, rules, finding)
        written, frames = _removed(pdf, rules, finding, remove)
    known = len(finding.values)
    # the marking-only double burns nothing
    burned = _shown(written, rules, finding, _painted(frames, finding.marks, {})) if remove else _Regions()
    if len(finding.values) > known:
        # values only the rendered page showed (text whose font does not say what it spells) may also sit in the
        # objects (a date in the metadata, a string): the removal is done again, from the input, with every value
        finding.counts, finding.marks = Counter(), {}
        with readable(), pikepdf.open(io.BytesIO(finding.source)) as pdf:
            _detach_pages_outside_the_tree(pdf)
            written, frames = _removed(pdf, rules, finding, remove)
    finding.counts["page_outside_the_tree"] += detached
    if remove and finding.values:
        with readable(), pikepdf.open(io.BytesIO(written)) as pdf:
            _strip_alternates(pdf, burned.appearances, finding)
            on_burned = _burn(pdf, written, burned, finding) if burned.shown or burned.beyond else set()
            search = Search(rules, sorted(finding.values))
            stripped = _strip_fields(pdf, on_burned, search, finding)
            if _empty_undrawn(pdf, search, finding) or stripped or burned:
                written = _saved(pdf)
    key = output_key(document.document_id, document.sha256, vid)
    summary = {
        "outcome": "redacted" if +finding.removed or burned else "no_matches",
        "output_key": key,
        "template_version": vid,
        "removed": dict(sorted((+finding.removed).items())),
        "marks": sum(len(boxes) for boxes in finding.marks.values()),
        "burned_regions": {str(index + 1): count for index, count in sorted(burned.per_page().items())},
        "ocr": {
            "engine": ocr.engine(),
            "languages": ocr.language_data(languages),
            "images": len(finding.readings),
            "pages": finding.pages_read,
            "dpi": ocr.PAGE_DPI,
        },
    }
    derivative = f"redacted-{key}.pdf"
    report = {"input": {"document_id": document.document_id, "sha256": document.sha256}, "derivative": derivative}
    return ProcessorResult(
        {derivative: written, REPORT: canonical_json(report | summary) + b"\n"},
        summary,
        {
            "derivative": derivative,
            "values": sorted(finding.values),
            "rules": rules,
            "languages": languages,
            "painted": _painted(frames, finding.marks, burned.shown),
        },
    )


def _removed(pdf: pikepdf.Pdf, rules: Rules, finding: Finding, remove: bool) -> tuple[bytes, list]:
    """The document with every value ``finding`` holds removed (unless ``remove`` is False) and marked, written, and
    each page's frame (how its rendering is placed). Pages are walked one at a time: memory stays that of one
    page's glyphs."""
    search = Search(rules, sorted(finding.values))
    occurrences = [_occurrence(value) for value in sorted(finding.values)]
    painted: set[tuple[int, int]] = set()  # images whose OCR words are painted out (or, marking only, counted)
    hidden: set[tuple[int, int]] = set()
    if remove:
        _rename_resources(pdf, search, finding)
    for number, page in enumerate(pdf.pages, 1):
        for drawn, walked in enumerate(_walks(pdftext.walk_page(page), _resources(page.obj), hidden)):
            # the page's own content is marked where it drew a value; what it draws elsewhere (a soft mask, a
            # pattern's cell, a glyph procedure: in a space of its own) is burned in where the page still shows it
            removed = (
                _glyphs_holding(walked, occurrences)
                if drawn
                else _page_glyphs(walked, number, occurrences, rules, finding)
            )
            scrubbed = frozenset(
                (stream, op)
                for stream, op, properties in walked.properties
                if any(_string_holds(v, search) for v in properties.values())
            )
            if remove:
                pdftext.rewrite(walked, removed, scrubbed)
                finding.counts["marked_content"] += len(scrubbed)
                finding.counts["content"] += _rewrite_holding(walked, search)
            _images_on_page(walked, number, rules, occurrences, finding=finding, painted=painted, remove=remove)
    if remove:
        _remove_elsewhere(pdf, rules, search, occurrences=occurrences, finding=finding, painted=painted)
    _draw_marks(pdf, finding)
    frames = [_Frame.of(page) for page in pdf.pages]
    return _saved(pdf), frames


def _saved(pdf: pikepdf.Pdf) -> bytes:
    out = io.BytesIO()
    # fix_metadata_version would re-serialize the XMP that stays (its character references become literals). No
    # object streams: one would hold the objects' syntax (numbers, references, keys, strings hex-encoded) as
    # stream text, where a value (a year, a word such as "Contents") is found that no object holds
    pdf.save(
        out,
        deterministic_id=True,
        compress_streams=True,
        fix_metadata_version=False,
        object_stream_mode=pikepdf.ObjectStreamMode.disable,
    )
    return out.getvalue()


@contextlib.contextmanager
def readable():
    """qpdf's own refusals (the gate's parser accepted what qpdf does not) are the input's, not a defect."""
    try:
        yield
    except pikepdf.PdfError as error:
        raise EvidenceError(
            ReasonCode.REDACTION_UNSUPPORTED_CONTENT, f"qpdf cannot read or write the document ({type(error).__name__})"
        ) from None


def find(pdf: pikepdf.Pdf, rules: Rules, finding: Finding) -> None:
    """Every value the rules match anywhere: page text in both orders, images (OCR), named fields, and every string
    and text stream reachable in the file."""
    hidden: set[tuple[int, int]] = set()  # streams drawn outside content's `Do`s, walked once per document
    for number, page in enumerate(pdf.pages, 1):
        for drawn, walked in enumerate(_walks(pdftext.walk_page(page), _resources(page.obj), hidden)):
            views = _page_views(walked)
            if not drawn:  # the page's own content's, for the removal walk
                finding.views[number] = ((walked.text, len(walked.glyphs)), views)
            for label, value in _page_matches(views, rules):
                finding.add(label, value)
            for image, _ in walked.images:  # legibility is the rendered page's (a logo or photo reads as nothing)
                _match(rules, normalize(_read(image, finding).lines), finding)
            for _, _, properties in walked.properties:
                for value in properties.values():
                    if isinstance(value, pikepdf.String):
                        for text in _texts(bytes(value), str(value)):
                            _match(rules, text, finding)
            for owner, _ in walked.streams:  # the content as written: a comment is not drawn, but it is there
                for text in _texts(_content_bytes(owner)):
                    _match(rules, text, finding)
        for appearance in _appearances(page, hidden):  # drawn by a viewer, not by the content: read here
            for label, value in _page_matches(_page_views(appearance), rules):
                finding.add(label, value)
    for name, fld in _fields(pdf):
        if name in rules.fields and isinstance(fld.get("/V"), pikepdf.String):
            finding.add(rules.fields[name], str(fld.V))
    content = _content_streams(pdf)
    names: set[str] = set()  # the names (keys and values) already matched: most repeat (/Type, /Length)
    for container, key, value, container_key, _ in _reachable(pdf):
        for name in (key, value if isinstance(value, pikepdf.Name) else None):
            if isinstance(name, str) and name not in names:
                names.add(name)
                _match(rules, normalize(name_text(name)), finding)
        if isinstance(value, pikepdf.String):
            for text in _texts(bytes(value), str(value)):
                _match(rules, text, finding)
        elif isinstance(value, pikepdf.Stream) and value.get("/Subtype") == "/Image":
            if key == "/Thumb" or value.objgen in finding.readings:  # thumbnails go; page images are read
                continue
            reading = _read(value, finding)
            if not reading.legible and not _masks_an_image(container, key):
                raise EvidenceError(
                    ReasonCode.REDACTION_UNSUPPORTED_CONTENT,
                    "an image outside the page content cannot be read with confidence by OCR",
                )
            _match(rules, normalize(reading.lines), finding)
        elif isinstance(value, pikepdf.Stream) and _text_stream(key, value, content, container_key):
            for text in _texts(_stream_bytes(value)):
                _match(rules, text, finding)


def _masks_an_image(container, key) -> bool:
    """Whether the image is another image's soft mask or stencil mask: no image of its own, but the shape in which
    that image shows (a brush-lettered title is a plain colour drawn through one), judged with it where it is drawn,
    on the rendered page, as the page's images are; read alone, it is still searched for values."""
    return (
        key in ("/SMask", "/Mask") and isinstance(container, pikepdf.Stream) and container.get("/Subtype") == "/Image"
    )


def _appearances(page: pikepdf.Page, hidden: set):
    """The glyphs of each appearance stream (every state's) of the page's annotations and widgets, and of what each
    draws outside its `Do`s (``_walks``); an appearance the walk cannot read is left to the rendered page's
    reading, as any ink is."""
    for stream in _appearance_streams(page):
        with contextlib.suppress(EvidenceError):
            yield from _walks(pdftext.walk_form(stream), stream.get("/Resources"), hidden)


def _appearance_streams(page: pikepdf.Page):
    """Every appearance stream (normal, rollover, down; every state's) of the page's annotations and widgets."""
    for annot in _dictionaries(page.obj, "/Annots"):
        appearances = annot.get("/AP")
        for kind in appearances.values() if isinstance(appearances, pikepdf.Dictionary) else ():
            # a stream, or a dictionary of them by state (a Stream is no Dictionary to pikepdf)
            for stream in kind.values() if isinstance(kind, pikepdf.Dictionary) else [kind]:
                if isinstance(stream, pikepdf.Stream):
                    yield stream


def _walks(walked: pdftext.Page, resources, hidden: set):
    """``walked`` (content, with the form XObjects it draws), then the walk of each content stream that content
    drawn with ``resources`` draws other than by `Do` (``_drawn_with``: soft-mask groups, tiling patterns, Type3
    glyph procedures) and not in ``hidden`` yet, each in its own space. The walk of a glyph procedure keeps no
    image (its bitmap is a glyph's shape, read on the rendered page as any glyph); one the walk cannot read is left
    to the rendered page's reading, as any ink is."""
    yield walked
    for stream, drawn_with, kind in _drawn_with(resources, hidden):
        if kind == "form":  # walked where content draws it
            continue
        own = "/Resources" in stream
        if not own:  # what it inherits (PDF 2.0, 7.8.3), for the walk only
            stream.Resources = drawn_with
        try:
            inside = pdftext.walk_form(stream)
        except EvidenceError:
            continue
        finally:
            if not own:
                del stream["/Resources"]
        if kind == "glyph":
            inside.images = []
        yield inside


def _drawn_with(resources, seen: set):
    """(stream, the resources it is drawn with, how) for every content stream that content drawn with
    ``resources`` can draw: "form" (a form XObject, by `Do`), "mask" (an ExtGState's soft-mask group, by `gs`),
    "pattern" (a tiling pattern's cell, by `scn`/`SCN`), "glyph" (a Type3 font's glyph procedure, by showing
    text); then what each of those can draw, through its own resources or those it inherits. Each stream once
    (``seen``)."""
    stack = [resources]
    while stack:
        current = stack.pop()
        if not isinstance(current, pikepdf.Dictionary):
            continue
        for stream, inherited, kind in _drawn_by(current):
            if first_visit(stream, seen):
                own = stream.get("/Resources")
                drawn_with = own if isinstance(own, pikepdf.Dictionary) else inherited
                yield stream, drawn_with, kind
                stack.append(drawn_with)


def _drawn_by(resources: pikepdf.Dictionary):
    def entries(category: str) -> list:
        named = resources.get(category)
        return list(named.values()) if isinstance(named, pikepdf.Dictionary) else []

    for form in entries("/XObject"):
        if isinstance(form, pikepdf.Stream) and form.get("/Subtype") == "/Form":
            yield form, resources, "form"
    for state in entries("/ExtGState"):
        mask = state.get("/SMask") if isinstance(state, pikepdf.Dictionary) else None
        if isinstance(mask, pikepdf.Dictionary) and isinstance(mask.get("/G"), pikepdf.Stream):
            yield mask.G, resources, "mask"
    for pattern in entries("/Pattern"):
        if isinstance(pattern, pikepdf.Stream):  # a shading pattern is a dictionary: it draws no content
            yield pattern, resources, "pattern"
    for font in entries("/Font"):
        if isinstance(font, pikepdf.Dictionary) and font.get("/Subtype") == "/Type3":
            procedures, own = font.get("/CharProcs"), font.get("/Resources")
            for glyph in procedures.values() if isinstance(procedures, pikepdf.Dictionary) else ():
                if isinstance(glyph, pikepdf.Stream):
                    yield glyph, own if isinstance(own, pikepdf.Dictionary) else resources, "glyph"


def _match(rules: Rules, text: str, finding: Finding) -> None:
    for label, _, _, value in rules.matches(text):
        finding.add(label, value)


def _texts(data: bytes, *known: str) -> set[str]:
    """A string's or stream's text in every spelling, each as a rule reads it (``matching.text_views``, as the second
    pass's search reads it: a field's value as its appearance wraps it, a name set with a gap in Japanese)."""
    return {view for form in {*known, *decodings(data)} for view in text_views(form)}


# -- page text ---------------------------------------------------------------------------------------------------


NOBODY = -1  # the owner of a line break or a space in a view


@dataclass
class _View:
    """Text made of pieces, each owned by a glyph or an OCR word (or by nothing: a line break or a space)."""

    text: str
    owners: array  # each character's owner, NOBODY for none: compact, as the removal walk keeps every page's views

    @classmethod
    def of(cls, pieces) -> _View:
        pieces = list(pieces)
        owners = array("i", [NOBODY if owner is None else owner for owner, piece in pieces for _ in piece])
        return cls("".join([piece for _, piece in pieces]), owners)

    def covered(self, occurrences) -> set[int]:
        chosen: set[int] = set()
        for occurrence in occurrences:
            for match in occurrence.finditer(self.text):
                chosen |= {o for o in self.owners[match.start() : match.end()] if o != NOBODY}
        return chosen


def _occurrence(value: str):
    """A found value wherever it is written: any whitespace (or none) between its characters, or a hyphen where a
    line wraps (matching.wrapped), any case."""
    return compile_pattern("(?i)" + _WRAPPED.join(re.escape(c) for c in value if not c.isspace()))


_WRAPPED = rf"(?:\s*|[{re.escape(HYPHENS)}][ \t]*[\r\n]\s*)"


def _page_views(page: pdftext.Page) -> list[_View]:
    """The page's glyphs as text: in drawing order, with a line break where the content starts a line and with
    lines joined (a value wrapped at the end of a line); in drawing order joined by where the glyphs sit (each
    glyph that starts where the one drawn before it ends continues its word, as pdftotext reads: content may start
    a line at every glyph, and draw another word over or among it); and, when it differs, in reading order (lines
    top to bottom, glyphs left to right: content may draw a line backwards), and again with glyphs up to _BOUNCE of
    their height off the line's first on it (a line whose glyphs bounce, drawn out of order: a reader reads one
    line; lines set solid stay apart). Each view of lines is read again with a hyphen at a line's end dropped and
    the lines joined (a word hyphenated where it wraps, as a reader reads it), and, on a page of a script written
    without spaces, with the gaps and line ends between its characters dropped (``_unspaced``)."""
    texts = [normalize_glyphs(glyph.text) for glyph in page.glyphs]
    drawing, breaks, previous_end = [], [], None  # breaks: what drawing order puts before each glyph
    for index, glyph in enumerate(page.glyphs):
        breaks.append("\n" if previous_end is not None and page.offsets[index] != previous_end else "")
        if breaks[-1]:
            drawing.append((None, "\n"))
        previous_end = page.offsets[index] + len(glyph.text)
        drawing.append((index, texts[index]))
    views = [_View.of(drawing), _View.of(piece for piece in drawing if piece[0] is not None)]
    placed = [_placement(glyph) for glyph in page.glyphs]
    geometry, same = [], True
    for index, text in enumerate(texts):
        if index:
            between = _between(placed[index - 1], placed[index])
            same = same and between == breaks[index]
            geometry.append((None, between))
        geometry.append((index, text))
    lined = [drawing] if same else [drawing, geometry]  # the same text read twice finds nothing more
    points, orders = [_origin(glyph) for glyph in page.glyphs], []
    for within in (0.5, _BOUNCE):
        order = _reading_order(points, within)
        if order is None or order in orders:
            continue
        orders.append(order)
        reading, last = [], None
        for index in order:
            if last is not None:
                if not _same_line(points[last], points[index], within):
                    reading.append((None, "\n"))
                elif points[index][0] - points[last][0] - page.glyphs[last].width > 0.2 * points[last][2]:
                    reading.append((None, " "))
            reading.append((index, texts[index]))
            last = index
        lined.append(reading)
    views += [_View.of(pieces) for pieces in lined[1:]]
    joins = (_dehyphenated, _unspaced) if UNSPACED.search("".join(texts)) else (_dehyphenated,)
    return views + [_View.of(joined) for join in joins for joined in map(join, lined) if joined is not None]


def _dehyphenated(pieces: list) -> list | None:
    """The pieces with each line break after a hyphen dropped, and the hyphen with it; None when no line ends in
    one."""
    out, dropped = [], False
    for owner, piece in pieces:
        if piece == "\n" and out and out[-1][1] in _HYPHENS:
            out.pop()
            dropped = True
            continue
        out.append((owner, piece))
    return out if dropped else None


_HYPHENS = frozenset(HYPHENS)  # a piece that is one of them


def _unspaced(pieces: list) -> list | None:
    """The pieces with each space or line break between two characters of a script written without spaces dropped
    (matching.unspaced: a column of vertical Japanese read on into the next); None when there is none."""
    out, dropped = [], False
    for index, (owner, piece) in enumerate(pieces):
        if (
            owner is None
            and out
            and index + 1 < len(pieces)
            and UNSPACED.match(out[-1][1][-1:])
            and UNSPACED.match(pieces[index + 1][1][:1])
        ):  # a break between two such characters
            dropped = True
            continue
        out.append((owner, piece))
    return out if dropped else None


def _placement(glyph: pdftext.Glyph) -> tuple[float, float, float, float, float, float, float] | None:
    """Where a glyph starts and ends on its baseline in default user space, its baseline's direction there and
    its height; None for a glyph drawn with no extent."""
    trm = pdftext.multiply(glyph.tm, glyph.ctm)
    length, height = math.hypot(trm[0], trm[1]), glyph.size * math.hypot(trm[2], trm[3])
    if not length or not height:
        return None
    return (
        trm[4],
        trm[5],
        trm[4] + glyph.width * trm[0],
        trm[5] + glyph.width * trm[1],
        trm[0] / length,
        trm[1] / length,
        height,
    )


def _between(a, b) -> str:
    """What a reader reads between two glyphs drawn one after the other: nothing when the second starts where the
    first ends on its baseline (up to a fifth of its height apart, or overlapping it by a third), a space when it
    starts further on along that baseline, else a line break."""
    if a is None or b is None or a[4] * b[4] + a[5] * b[5] < 0.99:
        return "\n"
    dx, dy = b[0] - a[2], b[1] - a[3]
    along, across = dx * a[4] + dy * a[5], dy * a[4] - dx * a[5]
    if abs(across) >= 0.5 * a[6] or along < -a[6] / 3:
        return "\n"
    return "" if along <= 0.2 * a[6] else " "


def _page_matches(views: list[_View], rules: Rules):
    """(label, value) of every rule's match in the page's views. In the view of joined lines only a match that
    begins where no match of its rule begins with the lines apart: a value wrapped at a line's end, not a match
    grown into the next line's first word."""
    lines, joined, *others = views
    starts = set()
    for view in (lines, *others):
        for label, start, _, value in rules.matches(view.text):
            starts.add((label, view.owners[start]))
            yield label, value
    for label, start, _, value in rules.matches(joined.text):
        if (label, joined.owners[start]) not in starts:
            yield label, value


def _rewrite_holding(page: pdftext.Page, search: Search) -> int:
    """Content streams whose bytes still hold a value (in a comment, which is not drawn), written again from their
    instructions (comments go); how many were."""
    rewritten = 0
    for owner, _ in page.streams:
        if search.holds_bytes(_content_bytes(owner)):
            _write_content(owner, pikepdf.parse_content_stream(owner))
            rewritten += 1
    return rewritten


def _write_content(owner, instructions) -> None:
    """A page's content (its streams made one) or a form's, written as ``instructions``."""
    data = pikepdf.unparse_content_stream(instructions)
    if isinstance(owner, pikepdf.Page):
        owner.contents_coalesce()
        owner.obj.Contents.write(data)
    else:
        owner.write(data)


# Resources content names as an operand (`gs`, `Do`, `Tf`, `scn`/`SCN`, `sh`, `cs`/`CS`, `BDC`/`DP`)
_NAMED_RESOURCES = ("/ExtGState", "/XObject", "/Font", "/Pattern", "/Shading", "/ColorSpace", "/Properties")


def _rename_resources(pdf: pikepdf.Pdf, search: Search, finding: Finding) -> None:
    """Each resource whose name spells a value (pyHanko's /BackgroundGS, a font named after a person) renamed, in
    every resource dictionary that holds it and in every content stream that names it, alike (one new name per
    old name in the document): the pages' content and annotation appearances, and what they draw (``_drawn_with``:
    form XObjects, soft-mask groups, tiling patterns, Type3 glyph procedures). Removing the entry instead would
    leave the content naming it: its bytes still spelling the value, and the drawing broken."""
    owners, dictionaries = [], []
    for owner, resources in _drawings(pdf):
        owners.append(owner)
        dictionaries.append(resources)
    named = [
        entries
        for resources in dictionaries
        if isinstance(resources, pikepdf.Dictionary)
        for category in _NAMED_RESOURCES
        if isinstance(entries := resources.get(category), pikepdf.Dictionary)
    ]
    used = {key for entries in named for key in entries.keys()}
    fresh = (f"/R{n}" for n in itertools.count(1) if f"/R{n}" not in used and not search.holds(f"R{n}"))
    renamed: dict[str, str] = {}
    for entries in named:
        for key in [key for key in entries.keys() if key in renamed or search.holds(name_text(key))]:
            renamed.setdefault(key, next(fresh))
            entries[renamed[key]] = entries[key]
            del entries[key]
            finding.counts["name"] += 1
    for owner in owners if renamed else ():
        instructions = list(pikepdf.parse_content_stream(owner))
        changed = [
            ([_renamed(operand, renamed) for operand in operands], operator)
            if not isinstance(operands, pikepdf.PdfInlineImage)
            else (operands, operator)
            for operands, operator in instructions
        ]
        if any(list(a) != b for (a, _), (b, _) in zip(instructions, changed) if isinstance(b, list)):
            _write_content(owner, changed)


def _drawings(pdf: pikepdf.Pdf):
    """(content, the resources it is drawn with) for everything a viewer draws: each page, each appearance stream
    of its annotations and widgets, and what they draw (``_drawn_with``: form XObjects, soft-mask groups, tiling
    patterns, Type3 glyph procedures)."""
    seen: set[tuple[int, int]] = set()
    for page in pdf.pages:
        for owner, resources in [
            (page, _resources(page.obj)),
            *((stream, stream.get("/Resources")) for stream in _appearance_streams(page)),
        ]:
            yield owner, resources
            for stream, drawn_with, _ in _drawn_with(resources, seen):
                yield stream, drawn_with


def _empty_undrawn(pdf: pikepdf.Pdf, search: Search, finding: Finding) -> bool:
    """Every content stream no viewer draws any more (a form XObject only a custom key reaches, an appearance whose
    widget lost it) that still carries a value or a match, as the second pass judges content (its strings, the
    names it uses, its comments, never its numbers), emptied: nothing shows it, and any parser reads its strings.
    Whether any was."""
    drawn = {owner.objgen for owner, _ in _drawings(pdf) if isinstance(owner, pikepdf.Stream)}
    emptied = 0
    for _, _, value, container_key, _ in _reachable(pdf):
        if (
            isinstance(value, pikepdf.Stream)
            and value.objgen not in drawn
            and _drawing(value, container_key)
            and _drawing_holds(value, search, lambda name: search.holds(name_text(name)))
        ):
            value.write(b"")
            emptied += 1
    finding.counts["stream"] += emptied
    return bool(emptied)


def _renamed(operand, renamed: dict[str, str]):
    """An operand with each name ``renamed`` holds (in an array or a dictionary's values too) replaced."""
    if isinstance(operand, pikepdf.Name):
        return pikepdf.Name(renamed[name_str(operand)]) if name_str(operand) in renamed else operand
    if isinstance(operand, pikepdf.Array):
        return pikepdf.Array([_renamed(item, renamed) for item in operand])
    if isinstance(operand, pikepdf.Dictionary):
        return pikepdf.Dictionary({key: _renamed(value, renamed) for key, value in operand.items()})
    return operand


def _content_bytes(owner) -> bytes:
    """A page's content (its streams joined, as a reader joins them) or a form XObject's."""
    if isinstance(owner, pikepdf.Page):
        contents = owner.obj.get("/Contents")
        streams = contents if isinstance(contents, pikepdf.Array) else [contents] if contents is not None else []
        return b"\n".join(_stream_bytes(stream) for stream in streams)
    return _stream_bytes(owner)


def _origin(glyph: pdftext.Glyph) -> tuple[float, float, float]:
    """Where a glyph starts on its baseline in default user space, and its height there."""
    tm, ctm = glyph.tm, glyph.ctm
    return (
        tm[4] * ctm[0] + tm[5] * ctm[2] + ctm[4],
        tm[4] * ctm[1] + tm[5] * ctm[3] + ctm[5],
        abs(glyph.size * (tm[2] * ctm[1] + tm[3] * ctm[3])),
    )


def _reading_order(points: list[tuple[float, float, float]], within: float) -> list[int] | None:
    """Glyph indices in reading order (lines of glyphs ``within`` their height of the line's first, top to bottom,
    left to right), or None when drawing order is it."""
    if all(
        _same_line(a, b, within) and b[0] >= a[0] or b[1] < a[1] and not _same_line(a, b, within)
        for a, b in zip(points, points[1:])
    ):
        return None
    lines: list[list[int]] = []
    for index in sorted(range(len(points)), key=lambda i: (-points[i][1], points[i][0])):
        if lines and _same_line(points[lines[-1][0]], points[index], within):
            lines[-1].append(index)
        else:
            lines.append([index])
    return [index for line in lines for index in sorted(line, key=lambda i: points[i][0])]


def _same_line(a, b, within: float) -> bool:
    return abs(a[1] - b[1]) < within * max(a[2], b[2], 1e-6)


def _glyphs_holding(page: pdftext.Page, occurrences) -> set[int]:
    """The glyphs of every occurrence of every found value in any view of the walk."""
    return {index for view in _page_views(page) for index in view.covered(occurrences)}


def _page_glyphs(page: pdftext.Page, number: int, occurrences, rules: Rules, finding: Finding) -> set[int]:
    """The page's glyphs to remove: every occurrence of every found value in either view, and what its regions
    cover. Marks one box per run of removed glyphs on a line."""
    chosen: set[int] = set()
    for view in finding.page_views(number, page):
        chosen |= view.covered(occurrences)
    for label, rect in rules.regions.get(number, []):
        inside = {i for i, g in enumerate(page.glyphs) if _centre_in(g.box, rect)}
        chosen |= inside
        if inside:
            finding.add(label, "".join(page.glyphs[i].text for i in sorted(inside)))
    line: list[tuple[float, float, float, float]] = []
    for index in sorted(chosen):
        glyph_box = page.glyphs[index].box
        if line and not (abs(glyph_box[1] - line[-1][1]) < 1 and glyph_box[0] - line[-1][2] < 12):
            finding.mark(number - 1, _union(line))
            line = []
        line.append(glyph_box)
    if line:
        finding.mark(number - 1, _union(line))
    return chosen


# -- images ------------------------------------------------------------------------------------------------------


def _read(image, finding: Finding) -> ocr.Reading:
    """The image's OCR, once per image object (an image drawn on many pages is read once)."""
    key = image.objgen if isinstance(image, pikepdf.Object) else None
    if key is not None and key in finding.readings:
        return finding.readings[key]
    reading = ocr.read(_pixels(image, finding.source))
    if key is not None:
        finding.readings[key] = reading
    return reading


def _pixels(image, source: bytes) -> Image.Image:
    """The image decoded (pikepdf, Pillow), or where they cannot, as pdfium decodes it where a page of ``source``
    draws it (ocr.pdfium_decoded: what a reader sees); refused when neither decodes it, and before decoding when it
    declares more pixels than the budget."""
    try:
        picture = pikepdf.PdfImage(image) if isinstance(image, pikepdf.Object) else image
        if picture.width * picture.height > budgets.MAX_IMAGE_PIXELS:  # inline images too, which the gate skips
            raise budgets.exceeded(f"an image of more than {budgets.MAX_IMAGE_PIXELS:,} pixels")
        try:
            return picture.as_pil_image()
        except StopIteration:  # an inline stencil mask: pikepdf's own conversion finds no image (_inline_mask)
            return _inline_mask(picture)
    except (
        pikepdf.PikepdfError,
        NotImplementedError,
        ValueError,
        OSError,
        Image.DecompressionBombError,
    ) as error:
        raw = image.read_raw_bytes() if isinstance(image, pikepdf.Stream) else None
        decoded = ocr.pdfium_decoded(source, raw) if raw is not None and source else None
        if decoded is not None:
            return decoded
        raise EvidenceError(
            ReasonCode.REDACTION_UNSUPPORTED_CONTENT, f"an image the redactor cannot decode ({type(error).__name__})"
        ) from None


def _inline_mask(image: pikepdf.PdfInlineImage) -> Image.Image:
    """An inline image pikepdf cannot convert, decoded as pikepdf converts one: written into a page of its own and
    externalized by qpdf, then decoded as an image XObject. pikepdf then looks for it among the page's images, where
    qpdf counts no stencil mask (/ImageMask true: a 1-bit shape painted in the fill colour), so it finds none; here
    it is the page's only XObject."""
    with pikepdf.Pdf.new() as pdf:
        pdf.add_blank_page()
        page = pdf.pages[0]
        page.contents_add(image.unparse())
        page.externalize_inline_images()
        (stream,) = page.Resources.XObject.values()
        return pikepdf.PdfImage(stream).as_pil_image()


def _words_holding(reading: ocr.Reading, occurrences) -> list[ocr.Word]:
    pieces, line = [], None
    for index, word in enumerate(reading.words):
        if line is not None:
            pieces.append((None, " " if word.line == line else "\n"))
        pieces.append((index, normalize_glyphs(word.text)))
        line = word.line
    return [reading.words[i] for i in sorted(_View.of(pieces).covered(occurrences))]


def _images_on_page(
    page: pdftext.Page, number: int, rules: Rules, occurrences, *, finding: Finding, painted: set, remove: bool
) -> None:
    """Paint out, in every image the page draws, the words OCR found that hold a value (once per image: an image
    drawn on several pages is one object) and what the page's regions cover; mark each area where it is drawn."""
    for image, ctm in page.images:
        words = _words_holding(_read(image, finding), occurrences)
        regions = [(label, rect) for label, rect in rules.regions.get(number, []) if _overlap(_placed(ctm), rect)]
        if not words and not regions:
            continue
        if not isinstance(image, pikepdf.Object):
            raise EvidenceError(
                ReasonCode.REDACTION_UNSUPPORTED_CONTENT,
                "an inline image holds text to remove" if words else "an inline image under a region",
            )
        width, height = int(image.Width), int(image.Height)
        boxes = [_padded(word.box, width, height) for word in words]
        for box in boxes:
            finding.mark(
                number - 1, pdftext.box(ctm, box[0] / width, 1 - box[3] / height, box[2] / width, 1 - box[1] / height)
            )
        if image.objgen in painted:
            boxes = []
        else:
            painted.add(image.objgen)
            finding.counts["image_text"] += len(words)
        for label, rect in regions:
            box, area = _region_pixels(ctm, rect, width, height)
            boxes.append(box)
            finding.counts[label] += 1
            finding.mark(number - 1, area)
        if remove and boxes:
            _paint(image, boxes, finding.source)


def _placed(ctm) -> tuple[float, float, float, float]:
    return pdftext.box(ctm, 0, 0, 1, 1)


def _overlap(a, b) -> bool:
    return max(a[0], b[0]) < min(a[2], b[2]) and max(a[1], b[1]) < min(a[3], b[3])


def _padded(box, width: int, height: int) -> tuple[int, int, int, int]:
    return (
        max(0, box[0] - WORD_PADDING),
        max(0, box[1] - WORD_PADDING),
        min(width, box[2] + WORD_PADDING),
        min(height, box[3] + WORD_PADDING),
    )


def _region_pixels(ctm, rect, width: int, height: int):
    """(pixel box, page area) of a region over an image: an image drawn rotated or skewed is covered whole."""
    placed = _placed(ctm)
    if abs(ctm[1]) > 1e-9 or abs(ctm[2]) > 1e-9:
        return (0, 0, width, height), placed
    area = (max(placed[0], rect[0]), max(placed[1], rect[1]), min(placed[2], rect[2]), min(placed[3], rect[3]))
    us = sorted(((area[0] - ctm[4]) / ctm[0], (area[2] - ctm[4]) / ctm[0]))  # page -> unit square -> pixels
    vs = sorted(((area[1] - ctm[5]) / ctm[3], (area[3] - ctm[5]) / ctm[3]))  # (row 0 is the image's top)
    return (
        math.floor(us[0] * width),
        math.floor((1 - vs[1]) * height),
        math.ceil(us[1] * width),
        math.ceil((1 - vs[0]) * height),
    ), area


def _paint(image: pikepdf.Stream, boxes, source: bytes) -> None:
    """The boxes painted black in the image's own pixels, and the image re-encoded: the pixels are gone from the
    file, not covered. A JPEG stays a JPEG; an image whose raw pixels would pass the readers' per-stream limit is
    written as one too, else Flate at 8 bits per component."""
    pixels = _pixels(image, source)
    pixels = pixels.convert("RGB" if pixels.mode not in ("L", "RGB") else pixels.mode)
    draw = ImageDraw.Draw(pixels)
    for box in boxes:
        draw.rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill=0)
    _encode(image, pixels, jpeg=image.get("/Filter") == pikepdf.Name.DCTDecode)


def _grey(image: Image.Image) -> bool:
    """Whether an RGB image has no colour, a strip of rows at a time: a whole A1 page's channels compared at once
    took twice the page's memory."""
    for top in range(0, image.height, _STRIP):
        strip = numpy.asarray(image.crop((0, top, image.width, min(image.height, top + _STRIP))))
        if not ((strip[..., 0] == strip[..., 1]).all() and (strip[..., 1] == strip[..., 2]).all()):
            return False
    return True


def _encode(image: pikepdf.Stream, pixels: Image.Image, jpeg: bool = False) -> None:
    """The image stream's data replaced by ``pixels`` (grey or RGB): a JPEG when asked or when its raw pixels would
    pass the readers' per-stream limit, else Flate at 8 bits per component."""
    if jpeg or pixels.width * pixels.height * len(pixels.getbands()) > LIMITS["zlib_maximum_output_length"]:
        encoded = io.BytesIO()
        pixels.save(encoded, "JPEG", quality=90)
        image.write(encoded.getvalue(), filter=pikepdf.Name.DCTDecode)
    else:
        image.write(zlib.compress(pixels.tobytes()), filter=pikepdf.Name.FlateDecode)
    image.ColorSpace = pikepdf.Name.DeviceGray if pixels.mode == "L" else pikepdf.Name.DeviceRGB
    image.BitsPerComponent = 8
    for key in ("/Decode", "/DecodeParms", "/Mask", "/ImageMask", "/SMask"):
        if key in image:
            del image[key]


# -- the rendered page -------------------------------------------------------------------------------------------


def _painted(frames: list, marks: dict[int, list], burned: dict[int, list]) -> dict[int, list]:
    """The boxes this pass painted black on each page, in its rendering's pixels (ocr.shown_pages excuses their
    dark pixels, and no other dark area, in both passes): the regions burned in, and the marks where the page's
    rendering can be placed (elsewhere a mark's box is read as any ink is)."""
    painted = {index: list(boxes) for index, boxes in burned.items()}
    for index, boxes in marks.items():
        frame = frames[index]
        if frame is not None:
            placed = (frame.pixels(box, frame.size()) for box in boxes)
            painted.setdefault(index, []).extend(box for box in placed if box is not None)
    return painted


@dataclass
class _Regions:
    """Where the pages, in every view a reader can bring up (reader_views), still show a value, by page index:
    ``shown``, boxes of the page's rendering's pixels (burned in); ``beyond``, boxes of its default user space
    beyond its crop box (cut out: nothing shows there but the media box); ``appearances``, boxes of its default
    user space where an annotation's alternate appearance shows one (those appearances removed)."""

    shown: dict[int, list] = field(default_factory=dict)
    beyond: dict[int, list] = field(default_factory=dict)
    appearances: dict[int, list] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.shown or self.beyond or self.appearances)

    def per_page(self) -> Counter:
        """Regions burned in or cut out (beyond the crop box), by page index."""
        return Counter({index: len(boxes) for index, boxes in self.shown.items()}) + Counter(
            {index: len(boxes) for index, boxes in self.beyond.items()}
        )


def _shown(data: bytes, rules: Rules, finding: Finding, painted: dict[int, list]) -> _Regions:
    """What the object-level pass left visible in any view a reader can bring up, as the second pass reads it
    (reader_views.every_view: every optional-content layer, print-only annotations, each annotation's alternate
    appearances and the media box beyond the crop box, on pages appended after the originals): each page of that
    document read whole by OCR (ocr.py) and its tinted and coloured areas by their contrast
    (reader_views.contrast_readings); every rule's match and every found value in what they read becomes a region
    of the page it shows on. A page OCR cannot read with confidence, unless a region rule covers it, is refused.

    Optional content is not flattened (as Acrobat's Sanitize does, dropping every hidden layer): a region where a
    value shows with every layer on is burned like any other (the cut takes what is drawn across it whatever its
    marking, and draws the default view's pixels), so a hidden layer that holds no value keeps its content, and
    no visibility expression (/OCMD /VE) has to be evaluated to know what a viewer hides."""
    view, appended = reader_views.every_view(data)
    frames = []
    if appended:
        with pikepdf.open(io.BytesIO(view)) as viewed:
            frames = [_Frame.of(page) for page in viewed.pages]
    first_appended = len(frames) - len(appended) if appended else math.inf
    readings, sizes, tinted = [], {}, {}
    for index, shown in ocr.shown_pages(view, painted):
        finding.pages_read += shown.bands > 0 and index < first_appended
        page = index if index < first_appended else appended[index - first_appended].page
        if not shown.reading.legible and page + 1 not in rules.regions:
            raise EvidenceError(
                ReasonCode.REDACTION_UNSUPPORTED_CONTENT,
                f"page {page + 1} as rendered cannot be read with confidence by OCR; only a region rule can redact it",
            )
        readings.append((index, shown.reading, False))
        sizes[index] = shown.size
        if shown.ink is not None and (area := reader_views.tinted_area(shown.ink)):
            tinted[index] = area
    readings += ((index, reading, True) for index, reading in reader_views.contrast_readings(view, tinted))
    for _, reading, _ in readings:
        for text in reading.views:
            _match(rules, normalize(text), finding)
    regions = _Regions()
    occurrences = [_occurrence(value) for value in sorted(finding.values)]
    for index, reading, again in readings:
        boxes = [_padded(word.box, *sizes[index]) for word in _words_holding(reading, occurrences)]
        if not boxes:
            continue
        if index < first_appended:
            _add(regions.shown.setdefault(index, []), boxes, again)
        elif frames[index] is not None:  # drawn in the original's user space
            page, kind = appended[index - first_appended]
            held = regions.beyond if kind == reader_views.MEDIA_BOX else regions.appearances
            held.setdefault(page, []).extend(frames[index].user(box) for box in boxes)
    for index, boxes in _text_layer_regions(data, rules, finding).items():
        regions.shown.setdefault(index, []).extend(boxes)
    return regions


def _add(held: list, boxes: list, again: bool) -> None:
    """``boxes`` added to the regions ``held``; read ``again`` (the contrast reading of what the page's reading
    may have read too), a box that overlaps one held widens it instead: one region per word, however often read."""
    for box in boxes:
        near = next((n for n, h in enumerate(held) if again and cut.meets(h, [box])), None)
        if near is None:
            held.append(box)
        else:
            held[near] = _union([held[near], box])


def _text_layer_regions(data: bytes, rules: Rules, finding: Finding) -> dict[int, list[tuple[int, int, int, int]]]:
    """The characters of every rule's match and every found value in each page's text as pdfium reads it from its
    fonts, as regions of the rendering's pixels, by page index: text the object-level walk reads as U+FFFD (an
    embedded font's own encoding, which pdfium decodes) that OCR did not read (small print), or that its views
    join otherwise."""
    regions: dict[int, list[tuple[int, int, int, int]]] = {}
    with PDFIUM_LOCK:
        document = pypdfium2.PdfDocument(data)
        try:
            for index in range(len(document)):
                page = document[index]
                textpage = page.get_textpage()
                try:
                    # a character per index (the range's text may expand a ligature, and shift the indices); half
                    # of a surrogate pair (a letter outside the basic plane) is read as U+FFFD
                    codes = [pdfium_c.FPDFText_GetUnicode(textpage.raw, i) for i in range(textpage.count_chars())]
                    text = "".join("\ufffd" if 0xD800 <= code < 0xE000 else chr(code) for code in codes)
                    _match(rules, normalize(text), finding)
                    chosen = _View.of(enumerate(map(normalize_glyphs, text))).covered(
                        [_occurrence(value) for value in sorted(finding.values)]
                    )
                    width, height = page.get_size()
                    size = (round(width * ocr.PAGE_DPI / 72), round(height * ocr.PAGE_DPI / 72))
                    boxes = [ocr.device_box(page, size, textpage.get_charbox(i, loose=True)) for i in sorted(chosen)]
                    if boxes := [_padded(box, *size) for box in boxes if box[0] < box[2] and box[1] < box[3]]:
                        regions[index] = boxes
                finally:
                    textpage.close()
                    page.close()
        finally:
            document.close()
    return regions


def _burn(pdf: pikepdf.Pdf, data: bytes, regions: _Regions, finding: Finding) -> set[tuple[int, int]]:
    """The regions destroyed, not covered: on each page, everything drawn across a region (``cut.across``: glyphs,
    paths, images, inline images, form XObject placements, shadings, whatever optional content marks them;
    annotations and widgets whose rectangle meets one, print-only ones included) is taken out, and the page's
    rendering (annotations and form appearances drawn) of the area those objects covered is drawn in their place,
    the regions painted black (``_burn_areas``); what is drawn across a region beyond the crop box is taken out
    only (no view but the media box shows it). The rest of the page keeps its objects and its text layer. The cut
    page is rendered again in every view (reader_views.every_view): if any ink is left in a region (an object
    whose bounds the walk did not see, a glyph in a form XObject's text drawn where its box says it is not), or the
    page's geometry is one the rendering cannot be placed back on, the whole page becomes its rendering
    (``_burn_page``). The annotations and widgets taken out, or on a page burned whole (``_strip_fields``)."""
    pages = set(regions.shown) | set(regions.beyond)
    frames = {index: _Frame.of(pdf.pages[index]) for index in pages}
    annotations = {index: {a.objgen for a in _dictionaries(pdf.pages[index].obj, "/Annots")} for index in pages}
    areas, on_burned = {}, set()
    for index in sorted(pages):
        frame, beyond = frames[index], regions.beyond.get(index, [])
        if frame is not None:
            page = pdf.pages[index]
            areas[index], dropped = _cut(
                pdf,
                page,
                [frame.user(box) for box in regions.shown.get(index, [])] + beyond,
                _normal(page.mediabox) if beyond else frame.box,
            )
            on_burned |= dropped
    shown = set(areas) & set(regions.shown)
    clean = (
        {
            index
            for index, image in ocr.rendered_pages(reader_views.every_view(_saved(pdf))[0], only=shown)
            if _blank(image, regions.shown[index])
        }
        if shown
        else set()
    )
    for index, image in ocr.rendered_pages(data, only=set(regions.shown), colour=True):
        draw = ImageDraw.Draw(image)
        for box in regions.shown[index]:
            draw.rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill=0)
        if index in clean and frames[index].fits(image):
            _burn_areas(pdf, pdf.pages[index], image, frames[index], areas[index])
        else:
            _burn_page(pdf, pdf.pages[index].obj, image)
            on_burned |= annotations[index]
            finding.counts["burned_page"] += 1
    return on_burned


def _strip_alternates(pdf: pikepdf.Pdf, appearances: dict[int, list], finding: Finding) -> None:
    """Each annotation whose rectangle meets a region where one of its alternate appearances shows a value keeps
    only the appearance it shows: its rollover and down appearances and its states not selected go (a check box
    keeps its value, not the picture of its other state)."""
    for index, boxes in appearances.items():
        for annot in _dictionaries(pdf.pages[index].obj, "/Annots"):
            rect = annot.get("/Rect")
            if not isinstance(rect, pikepdf.Array) or len(rect) != 4 or not cut.meets(_normal(rect), boxes):
                continue
            shown = annot.get("/AP")
            if not isinstance(shown, pikepdf.Dictionary):
                continue
            for key in ("/R", "/D"):
                if key in shown:
                    del shown[key]
            states, selected = shown.get("/N"), str(annot.get("/AS", ""))
            if isinstance(states, pikepdf.Dictionary):
                shown.N = pikepdf.Dictionary({selected: states[selected]} if selected in states else {})
            finding.counts["alternate_appearance"] += 1


def _strip_fields(pdf: pikepdf.Pdf, on_burned: set, search: Search, finding: Finding) -> bool:
    """A field whose widget was burned in (``on_burned``) loses its value and appearance; a field whose widget's
    appearance still holds a value as bytes (drawn clipped, or where OCR did not read it) is removed whole. Whether
    any field changed."""
    leftover, changed = Finding(), False
    for _, fld in _fields(pdf):
        widgets = _widgets(fld)
        if any(widget.objgen in on_burned for widget in widgets):  # drawn in the burned pixels
            for holder, key in [(fld, "/V"), (fld, "/DV"), *((widget, "/AP") for widget in widgets)]:
                if key in holder:
                    del holder[key]
                    changed = True
        elif any(_holds_anywhere(widget.AP, search) for widget in widgets if "/AP" in widget):
            _remove_field(pdf, fld, leftover)
            changed = True
    _draw_marks(pdf, leftover)
    finding.counts.update(leftover.counts)
    for index, boxes in leftover.marks.items():
        finding.marks.setdefault(index, []).extend(boxes)
    return changed


@dataclass(frozen=True)
class _Frame:
    """Where a page's rendering (ocr.rendered_pages: its crop box within its media box at PAGE_DPI, turned as
    /Rotate says) lies in default user space."""

    box: tuple[float, float, float, float]
    turn: int

    @classmethod
    def of(cls, page: pikepdf.Page) -> _Frame | None:
        """None for a page whose rendering this frame cannot place (a /UserUnit, a /Rotate not a right angle)."""
        turn = int(page.rotation) % 360
        if float(page.obj.get("/UserUnit", 1)) != 1 or turn % 90:
            return None
        crop, media = _normal(page.cropbox), _normal(page.mediabox)
        box = (max(crop[0], media[0]), max(crop[1], media[1]), min(crop[2], media[2]), min(crop[3], media[3]))
        return cls(box, turn) if box[0] < box[2] and box[1] < box[3] else None

    def size(self) -> tuple[int, int]:
        """The rendering's size in pixels."""
        width, height = self.box[2] - self.box[0], self.box[3] - self.box[1]
        width, height = (height, width) if self.turn in (90, 270) else (width, height)
        scale = ocr.PAGE_DPI / 72
        return round(width * scale), round(height * scale)

    def fits(self, image: Image.Image) -> bool:
        """Whether ``image`` is this frame's rendering (pdfium agreed on the page's size and turn)."""
        width, height = self.size()
        return abs(image.width - width) <= 2 and abs(image.height - height) <= 2

    def _point(self, px: float, py: float) -> tuple[float, float]:
        (x0, y0, x1, y1), s = self.box, ocr.PAGE_DPI / 72
        return {
            0: (x0 + px / s, y1 - py / s),
            90: (x0 + py / s, y0 + px / s),
            180: (x1 - px / s, y0 + py / s),
            270: (x1 - py / s, y1 - px / s),
        }[self.turn]

    def user(self, pixels) -> tuple[float, float, float, float]:
        """A box of the rendering's pixels in default user space."""
        (ax, ay), (bx, by) = self._point(pixels[0], pixels[1]), self._point(pixels[2], pixels[3])
        return min(ax, bx), min(ay, by), max(ax, bx), max(ay, by)

    def pixels(self, area, size: tuple[int, int]) -> tuple[int, int, int, int] | None:
        """The rendering's pixels (of ``size``) that a box in default user space covers, or None."""
        (x0, y0, x1, y1), s = self.box, ocr.PAGE_DPI / 72
        corners = [
            {
                0: ((x - x0) * s, (y1 - y) * s),
                90: ((y - y0) * s, (x - x0) * s),
                180: ((x1 - x) * s, (y - y0) * s),
                270: ((y1 - y) * s, (x1 - x) * s),
            }[self.turn]
            for x, y in ((area[0], area[1]), (area[2], area[3]))
        ]
        left, top = max(0, math.floor(min(c[0] for c in corners))), max(0, math.floor(min(c[1] for c in corners)))
        right = min(size[0], math.ceil(max(c[0] for c in corners)))
        bottom = min(size[1], math.ceil(max(c[1] for c in corners)))
        return (left, top, right, bottom) if left < right and top < bottom else None


def _cut(pdf: pikepdf.Pdf, page: pikepdf.Page, regions: list, box) -> tuple[list, set]:
    """Everything the page draws across ``regions`` (default user space) taken out of it: (the bounds of what was
    taken, the regions included; the annotations taken)."""
    page.obj.Contents = pdf.make_stream(_content_bytes(page))  # its own: a stream another page shares stays there
    walked = pdftext.walk_page(page)
    taken = cut.across(walked, page.obj.get("/Resources", pikepdf.Dictionary()), regions, box)
    pdftext.rewrite(walked, taken.glyphs, replaced=taken.instructions)
    _prune(page, taken.patterns)
    kept, dropped = [], set()
    for annot in _dictionaries(page.obj, "/Annots"):
        rect = _normal(annot.Rect) if isinstance(annot.get("/Rect"), pikepdf.Array) and len(annot.Rect) == 4 else None
        if rect is not None and cut.meets(rect, regions):
            dropped.add(annot.objgen)
            taken.areas.append(rect)
            for key in ("/AP", "/Contents", "/RC"):  # what it showed is pixels now, wherever else it is reached
                if key in annot:
                    del annot[key]
        else:
            kept.append(annot)
    if dropped:  # with their popups (a popup shows its parent's text)
        page.obj.Annots = pikepdf.Array(
            [annot for annot in kept if not _dictionaries(annot, "/Parent") or annot.Parent.objgen not in dropped]
        )
    return taken.areas + regions, dropped


def _prune(page: pikepdf.Page, patterns: set[str]) -> None:
    """The page given its own resources, without the images, forms and shadings its content no longer names, nor
    the patterns nothing it still draws paints with: what was cut is not reachable from the page."""
    named = {
        str(operand)
        for operands, _ in pikepdf.parse_content_stream(page)
        if not isinstance(operands, pikepdf.PdfInlineImage)
        for operand in operands
        if isinstance(operand, pikepdf.Name)
    }
    resources = pikepdf.Dictionary(dict(_resources(page.obj).items()))
    for kind, kept in (("/XObject", named), ("/Shading", named), ("/Pattern", patterns)):
        if isinstance(resources.get(kind), pikepdf.Dictionary):
            resources[kind] = pikepdf.Dictionary({k: v for k, v in resources[kind].items() if k in kept})
    page.obj.Resources = resources


def _normal(rect) -> tuple[float, float, float, float]:
    """A rectangle's (left, bottom, right, top), whichever corners it names."""
    x0, y0, x1, y1 = (float(v) for v in rect)
    return min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)


def _blank(image: Image.Image, regions: list) -> bool:
    """Whether a rendering shows no ink inside any region (its padding left out: a glyph beside a word may reach
    into it)."""
    pixels = numpy.asarray(image)
    return all(
        pixels[box[1] + WORD_PADDING : box[3] - WORD_PADDING, box[0] + WORD_PADDING : box[2] - WORD_PADDING].min(
            initial=255
        )
        >= ocr.INK
        for box in regions
    )


def _burn_areas(pdf: pikepdf.Pdf, page: pikepdf.Page, image: Image.Image, frame: _Frame, areas: list) -> None:
    """The rendering ``image`` of each cluster of ``areas`` (overlapping boxes joined) drawn over the page where it
    was, turned back into the page's own orientation: an image per cluster, in the page's own resources."""
    clusters = _clusters([box for box in (frame.pixels(area, image.size) for area in areas) if box is not None])
    resources = page.obj.Resources  # the page's own (``_prune``)
    xobjects = pikepdf.Dictionary(dict(resources.get("/XObject", pikepdf.Dictionary()).items()))
    drawn = []
    for number, pixels in enumerate(clusters):
        piece = image.crop(pixels)
        if frame.turn:  # pixels of the turned page, back in the page's own orientation
            piece = piece.transpose(
                {90: Image.Transpose.ROTATE_90, 180: Image.Transpose.ROTATE_180, 270: Image.Transpose.ROTATE_270}[
                    frame.turn
                ]
            )
        name = next(f"/Burned{number}.{n}" for n in range(len(xobjects) + 1) if f"/Burned{number}.{n}" not in xobjects)
        xobjects[name] = _picture(pdf, piece)
        x0, y0, x1, y1 = frame.user(pixels)
        drawn.append(f"q {x1 - x0:.4f} 0 0 {y1 - y0:.4f} {x0:.4f} {y0:.4f} cm {name} Do Q\n".encode())
    resources.XObject = xobjects
    page.obj.Contents = pdf.make_stream(b"q\n" + _content_bytes(page) + b"\nQ\n" + b"".join(drawn))


def _clusters(boxes: list) -> list[tuple[int, int, int, int]]:
    """The boxes, those that overlap or touch joined into their union, in order."""
    clusters: list[tuple[int, int, int, int]] = []
    for box in sorted(boxes):
        while (
            near := next(
                (
                    c
                    for c in clusters
                    if max(c[0], box[0]) <= min(c[2], box[2]) and max(c[1], box[1]) <= min(c[3], box[3])
                ),
                None,
            )
        ) is not None:
            clusters.remove(near)
            box = _union([near, box])
        clusters.append(box)
    return sorted(clusters)


def _resources(page: pikepdf.Dictionary) -> pikepdf.Dictionary:
    """A page's resources, its own or inherited from the page tree."""
    node, depth = page, 0
    while isinstance(node, pikepdf.Dictionary) and depth < 64:
        if isinstance(node.get("/Resources"), pikepdf.Dictionary):
            return node.Resources
        node, depth = node.get("/Parent"), depth + 1
    return pikepdf.Dictionary()


def _picture(pdf: pikepdf.Pdf, image: Image.Image) -> pikepdf.Stream:
    """An image XObject of ``image`` (in grey when it has no colour: a third of the bytes, and lossless where a
    colour page would need a JPEG)."""
    if _grey(image):
        image = image.convert("L")
    picture = pdf.make_stream(
        b"", Type=pikepdf.Name.XObject, Subtype=pikepdf.Name.Image, Width=image.width, Height=image.height
    )
    _encode(picture, image)
    return picture


def _burn_page(pdf: pikepdf.Pdf, page: pikepdf.Dictionary, image: Image.Image) -> None:
    """The page replaced by its rendering ``image``, drawn as one image: its objects, annotations and text layer
    go."""
    width, height = image.width * 72 / ocr.PAGE_DPI, image.height * 72 / ocr.PAGE_DPI
    for key in (
        "/CropBox",
        "/BleedBox",
        "/TrimBox",
        "/ArtBox",
        "/Rotate",
        "/UserUnit",
        "/Group",
        "/Annots",
        "/StructParents",
        "/Tabs",
    ):
        if key in page:
            del page[key]
    page.MediaBox = [0, 0, width, height]
    page.Resources = pikepdf.Dictionary(XObject=pikepdf.Dictionary(Burned=_picture(pdf, image)))
    page.Contents = pdf.make_stream(f"q {width:.4f} 0 0 {height:.4f} 0 0 cm /Burned Do Q\n".encode())


# -- everything else ---------------------------------------------------------------------------------------------


def _remove_elsewhere(
    pdf: pikepdf.Pdf, rules: Rules, search: Search, *, occurrences, finding: Finding, painted: set
) -> None:
    for name, fld in _fields(pdf):
        if name in rules.fields:
            _remove_field(pdf, fld, finding)
        elif any(_string_holds(fld.get(key), search) for key in ("/V", "/DV")):
            for key in ("/V", "/DV"):  # the value goes; what its appearance shows is burned in where it shows
                if key in fld:
                    del fld[key]
            finding.counts["field"] += 1
    content = _content_streams(pdf)
    for number, page in enumerate(pdf.pages):
        if "/Thumb" in page.obj:  # a picture of the original page
            del page.obj["/Thumb"]
            finding.counts["thumbnail"] += 1
        if "/Annots" not in page.obj:
            continue
        kept, dropped = [], set()
        for annot in _dictionaries(page.obj, "/Annots"):
            attachment = annot.get("/Subtype") == "/FileAttachment"
            if attachment or (annot.get("/Subtype") != "/Widget" and _holds_anywhere(annot, search)):
                finding.counts["attachment" if attachment else "annotation"] += 1
                dropped.add(annot.objgen)
                if "/Rect" in annot:
                    finding.mark(number, annot.Rect)
                continue
            kept.append(annot)
        # a removed annotation's popup goes with it (the popup shows the parent's text)
        page.obj.Annots = pikepdf.Array(
            [
                annot
                for annot in kept
                if annot.get("/Subtype") != "/Popup"
                or not _dictionaries(annot, "/Parent")
                or annot.Parent.objgen not in dropped
            ]
        )
    specifications = []  # the file specifications of embedded and associated (PDF 2.0) files, counted once each
    names = pdf.Root.get("/Names")
    if names is not None and "/EmbeddedFiles" in names:
        specifications += _name_tree_leaves(names.EmbeddedFiles)
        del names["/EmbeddedFiles"]
    for holder in [pdf.Root, *(page.obj for page in pdf.pages)]:
        if "/AF" in holder:
            specifications += _dictionaries(holder, "/AF")
            del holder["/AF"]
    finding.counts["attachment"] += len({spec.objgen if spec.is_indirect else id(spec) for spec in specifications})
    for image_key, reading in finding.readings.items():  # images outside the page content (appearances ...)
        if image_key not in painted and (words := _words_holding(reading, occurrences)):
            image = pdf.get_object(image_key)
            _paint(image, [_padded(w.box, int(image.Width), int(image.Height)) for w in words], finding.source)
            finding.counts["image_text"] += len(words)
    _sweep(pdf, search, finding, content)


def _remove_field(pdf: pikepdf.Pdf, fld, finding: Finding) -> None:
    """A field removed whole: value, default value and appearance; its widgets hidden and marked."""
    for key in ("/V", "/DV"):
        if key in fld:
            del fld[key]
    finding.counts["field"] += 1
    for widget in _widgets(fld):
        if "/AP" in widget:
            del widget["/AP"]
        widget.F = 2  # hidden: a viewer drawing the empty field would paint over its mark
        if "/Rect" in widget:
            finding.mark(_page_of(pdf, widget), widget.Rect)


def _sweep(pdf: pikepdf.Pdf, search: Search, finding: Finding, content: set) -> None:
    """Every string and text stream still reachable that holds a value or a match, removed as the module says."""
    info = pdf.trailer.get("/Info")
    info_key = info.objgen if info is not None and info.is_indirect else None
    deletions: list[tuple[object, object, str]] = []  # (container, key or index, place)
    names: dict[str, bool] = {}  # name -> whether it holds, once per distinct name (most repeat: /Type, /Length)

    def holding(name: str) -> bool:
        if name not in names:
            names[name] = search.holds(name_text(name))
        return names[name]

    values_only = Search(Rules([], {}, {}), search.values)  # a font's text is its maker's: the values, as checked
    for container, key, value, container_key, action in _reachable(pdf):
        if isinstance(value, pikepdf.Stream) and key in _FONT_PROGRAMS:
            finding.counts["font_text"] += _blank_font_text(value, values_only)
            continue
        if isinstance(key, str) and holding(key):
            deletions.append((container, key, "name"))  # a key that spells a value: its entry goes
        if isinstance(value, pikepdf.Name) and holding(name_str(value)):
            if isinstance(key, int):
                container[key] = pikepdf.Name("/redacted")
                finding.counts["name"] += 1
            else:
                deletions.append((container, key, "name"))
            continue
        if isinstance(value, (pikepdf.Dictionary, pikepdf.Stream)) and "/EF" in value:
            deletions.append((value, "/EF", "attachment"))  # a file specification's embedded file, wherever
        if isinstance(value, pikepdf.String):
            holds = _string_holds(value, search)
        elif isinstance(value, pikepdf.Stream) and _text_stream(key, value, content, container_key):
            holds = search.holds_bytes(_stream_bytes(value))
        else:
            continue
        if not holds:
            continue
        if action is not None:
            deletions.append(action)
        elif isinstance(value, pikepdf.Stream):
            if key == "/Metadata":
                deletions.append((container, key, "metadata"))
            else:
                value.write(b"")
                finding.counts["stream"] += 1
        elif container_key == "/Names" and isinstance(key, int):
            deletions.append((container, key - key % 2, "name"))  # a name tree's entry, key and value
        elif info_key is not None and container.objgen == info_key:
            deletions.append((container, key, "metadata"))
        else:
            container[key] = pikepdf.String(REDACTED)
            finding.counts["bookmark" if key == "/Title" and "/Parent" in container else "string"] += 1
    done = set()
    # array entries from the last, so that the indices of those before stay true
    for container, key, place in sorted(deletions, key=lambda d: d[1] if isinstance(d[1], int) else -1, reverse=True):
        if (id(container), key) in done:
            continue
        done.add((id(container), key))
        if isinstance(key, int):
            for _ in range(2 if place == "name" else 1):
                del container[key]
        elif key in container:
            del container[key]
        finding.counts[place] += 1


def _blank_font_text(program: pikepdf.Stream, values: Search) -> int:
    """The names and strings of a font program (its maker's notice and description, its names:
    pdfsyntax.font_spans) that hold a value, blanked in place with spaces of the same length, so the program keeps
    its layout and draws the same; how many were. Its glyph data is no text and stays."""
    data = _stream_bytes(program)
    holding = [
        (start, end, codec)
        for start, end, codec in pdfsyntax.font_spans(program, data) or ()
        if values.holds(data[start:end].decode(codec, "replace"))
    ]
    if holding:
        blanked = bytearray(data)
        for start, end, codec in holding:
            spaces = (end - start) // len(" ".encode(codec))
            blanked[start:end] = (" " * spaces).encode(codec).ljust(end - start, b" ")
        program.write(bytes(blanked))
    return len(holding)


def _reachable(pdf: pikepdf.Pdf):
    """(container, key, value, the container's own key, the deletion that removes the enclosing action) for every
    value reachable from the catalog and the document information; each indirect object is entered once."""
    seen: set[tuple[int, int]] = set()
    stack = [(pdf.trailer, key, pdf.trailer[key], None, None) for key in ("/Info", "/Root") if key in pdf.trailer]
    while stack:
        container, key, value, container_key, action = stack.pop()
        yield container, key, value, container_key, action
        if isinstance(value, (pikepdf.Dictionary, pikepdf.Stream, pikepdf.Array)):
            if value.is_indirect:
                if value.objgen in seen:
                    continue
                seen.add(value.objgen)
            if isinstance(value, pikepdf.Array):
                stack.extend((value, i, item, key, action) for i, item in enumerate(value))
            else:
                if _is_action(value):  # in a name tree (JavaScript, say) its entry goes with it
                    action = (
                        (container, key - key % 2, "name")
                        if container_key == "/Names" and isinstance(key, int)
                        else (container, key, "action")
                    )
                stack.extend((value, k, item, key, action) for k, item in value.items())


def _detach_pages_outside_the_tree(pdf: pikepdf.Pdf) -> int:
    """Every reference to a page the page tree does not hold (an outline's or a link's destination, an
    annotation's /P) made null or removed, so that qpdf, which writes what is referenced, drops the page and what
    only it draws; the count of such pages."""
    tree = {page.obj.objgen for page in pdf.pages}
    detached = set()
    for container, key, value, _, _ in _reachable(pdf):  # a container's entries are listed before it is changed
        if (
            isinstance(value, pikepdf.Dictionary)
            and value.is_indirect
            and value.get("/Type") == "/Page"
            and value.objgen not in tree
        ):
            detached.add(value.objgen)
            if isinstance(container, pikepdf.Array):
                container[key] = None
            else:
                del container[key]
    return len(detached)


def _holds_anywhere(annot, search: Search) -> bool:
    """Whether an annotation (or its appearance) holds a value in its text, its actions or its appearance."""
    seen, stack = set(), [annot]
    while stack:
        value = stack.pop()
        if isinstance(value, pikepdf.String) and _string_holds(value, search):
            return True
        if not first_visit(value, seen):
            continue
        if isinstance(value, pikepdf.Stream) and value.get("/Subtype") != "/Image":
            if (
                _drawing_holds(value, search, lambda name: search.holds(name_text(name)))
                if value.get("/Subtype") == "/Form"
                else search.holds_bytes(_stream_bytes(value))
            ):
                return True
        if isinstance(value, pikepdf.Array):
            stack.extend(value)
        elif value.get("/Type") not in ("/Page", "/Pages"):
            stack.extend(item for k, item in value.items() if k not in _ANNOTATION_LINKS)
    return False


def _string_holds(value, search: Search) -> bool:
    return isinstance(value, pikepdf.String) and any(
        search.holds(text) for text in {str(value), *decodings(bytes(value))}
    )


def _text_stream(key, stream: pikepdf.Stream, content: set, container_key) -> bool:
    """Whether a stream's decoded bytes are text a rule reads (XMP, JavaScript, rich text, private data): not page
    content or any other drawing, images, fonts, colour profiles, functions or CMaps."""
    if stream.objgen in content or key in _BINARY_STREAM_KEYS or _drawing(stream, container_key):
        return False
    if stream.get("/Subtype") in ("/Image", "/Form") or stream.get("/Type") in ("/CMap", "/EmbeddedFile", "/XObject"):
        return False
    return not any(mark in stream for mark in _BINARY_STREAM_MARKS)


def _drawing(stream: pikepdf.Stream, container_key) -> bool:
    """Whether a stream is content drawn other than as a page's: a form XObject, a tiling pattern's cell, a Type3
    glyph procedure, an annotation's appearance (in /AP, or in one of its dictionaries of states)."""
    return (
        stream.get("/Subtype") == "/Form"
        or stream.get("/PatternType") == 1
        or container_key in ("/CharProcs", "/AP", "/N", "/R", "/D")
    )


def _drawing_holds(stream: pikepdf.Stream, search: Search, holding) -> bool:
    """A content stream judged as the second pass judges it (its strings, the names it uses, its comments); by its
    bytes where they do not parse as content."""
    data = _stream_bytes(stream)
    holds = content_holds(data, search, holding)
    return search.holds_bytes(data) if holds is None else holds


def _stream_bytes(stream: pikepdf.Stream) -> bytes:
    try:
        return stream.read_bytes()
    except pikepdf.PdfError:  # a filter qpdf cannot decode: the raw bytes are what a reader would see
        return stream.read_raw_bytes()


def _content_streams(pdf: pikepdf.Pdf) -> set[tuple[int, int]]:
    found = set()
    for page in pdf.pages:
        contents = page.obj.get("/Contents")
        for stream in contents if isinstance(contents, pikepdf.Array) else [contents] if contents else []:
            found.add(stream.objgen)
    return found


def _draw_marks(pdf: pikepdf.Pdf, finding: Finding) -> None:
    """Black boxes over what was removed, drawn after the page's own content in default user space, each its own
    path (a region burned in later cuts only the boxes it meets)."""
    for index, boxes in sorted(finding.marks.items()):
        page = pdf.pages[index]
        page.contents_coalesce()
        drawing = b"".join(f"{x0:.2f} {y0:.2f} {x1 - x0:.2f} {y1 - y0:.2f} re f\n".encode() for x0, y0, x1, y1 in boxes)
        content = page.obj.Contents.read_bytes() if "/Contents" in page.obj else b""
        page.obj.Contents = pdf.make_stream(b"q\n" + content + b"\nQ\nq 0 g\n" + drawing + b"Q\n")


def _fields(pdf: pikepdf.Pdf):
    """(fully qualified name, field dictionary) of every terminal form field."""
    stack = [(item, "") for form in _dictionaries(pdf.Root, "/AcroForm") for item in _dictionaries(form, "/Fields")]
    seen = set()
    while stack:
        node, parent = stack.pop()
        if node.objgen in seen and node.objgen != (0, 0):
            continue
        seen.add(node.objgen)
        name = f"{parent}.{_text(node.get('/T'))}" if parent and "/T" in node else _text(node.get("/T")) or parent
        kids = [kid for kid in _dictionaries(node, "/Kids") if "/T" in kid]
        if kids:
            stack.extend((kid, name) for kid in kids)
        else:
            yield name, node


def _widgets(fld):
    kids = [kid for kid in _dictionaries(fld, "/Kids") if "/T" not in kid]
    return kids or [fld]


def _page_of(pdf: pikepdf.Pdf, widget) -> int:
    for number, page in enumerate(pdf.pages):
        if any(annot.objgen == widget.objgen for annot in _dictionaries(page.obj, "/Annots")):
            return number
    return 0


def _name_tree_leaves(tree) -> list:
    leaves, stack, seen = [], [tree], set()
    while stack:
        node = stack.pop()
        if node.is_indirect:
            if node.objgen in seen:  # a tree whose /Kids holds itself
                continue
            seen.add(node.objgen)
        names = node.get("/Names")
        leaves += list(names)[1::2] if isinstance(names, pikepdf.Array) else []
        stack.extend(_dictionaries(node, "/Kids"))
    return leaves


def _is_action(value) -> bool:
    """An action dictionary: its /S names an action type. A checkbox's appearance state or a Type 3 glyph may be
    named /S too, and is then a stream, not a type."""
    return isinstance(value.get("/S"), pikepdf.Name) and value.S in ACTIONS


def _dictionaries(holder, key: str) -> list:
    """The dictionaries of an entry that is meant to be an array of them (/Fields, /Kids, /Annots, /AF), or one
    dictionary. Writers put a lone dictionary where the array belongs (LibreOffice's /Fields), and nulls or numbers
    in it; a dictionary is read as one entry, anything else as none, as viewers read them."""
    value = holder.get(key) if isinstance(holder, (pikepdf.Dictionary, pikepdf.Stream)) else None
    return [
        item
        for item in (value if isinstance(value, pikepdf.Array) else [value])
        if isinstance(item, (pikepdf.Dictionary, pikepdf.Stream))
    ]


def _text(value) -> str | None:
    if isinstance(value, pikepdf.String):
        return str(value)
    return None


def _centre_in(glyph_box, rect) -> bool:
    x, y = (glyph_box[0] + glyph_box[2]) / 2, (glyph_box[1] + glyph_box[3]) / 2
    return rect[0] <= x <= rect[2] and rect[1] <= y <= rect[3]


def _union(boxes):
    return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))


REDACT = register(
    Operation(
        name="redact",
        processor=redact_document,
        options=ACTIVE_CONTENT_OPTION,
        pin_policy=templates.pin,
        input_refused=ReasonCode.REDACTION_INPUT_MISSING,
        verify=verify_derivative,
        outcomes=frozenset(
            {
                ReasonCode.REDACTION_INPUT_MISSING,
                ReasonCode.REDACTION_UNSUPPORTED_CONTENT,
                ReasonCode.REDACTION_VERIFICATION_FAILED,
                ReasonCode.TEMPLATE_NOT_IN_EFFECT,
            }
        ),
    )
)
