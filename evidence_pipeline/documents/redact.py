"""`redact`: a rental application's derivative with the pinned template's matches removed, not covered.

First pass (this module, pikepdf): find every value the template's rules match, in page text, form fields,
annotations, bookmarks and metadata; then remove each found value everywhere it occurs: the glyphs from the page
content streams (form XObjects included), form-field values and their appearances, the annotations that carry it,
the document information entries and the XMP packet that hold it, and bookmark titles. Attachments are always
removed. Each removed area on a page gets a black mark drawn in the page content. The derivative is written whole,
as one revision (qpdf writes only the objects still referenced: earlier revisions are gone), with a deterministic
/ID, so the same input and template version give the same bytes.

The second pass (`redaction_check`) verifies the written file independently before anything is published.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field

import pikepdf
from PIL import ImageDraw

from evidence_pipeline.documents import pdftext, templates
from evidence_pipeline.documents.redaction_check import verify_derivative
from evidence_pipeline.documents.registry import (
    ACTIVE_CONTENT_OPTION,
    Operation,
    ProcessorInput,
    ProcessorResult,
    register,
)
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.signing.dsse import canonical_json

REPORT = "redaction.json"
MARK_PADDING = 1.0  # points around a removed glyph's box
REDACTED_TITLE = "[redacted]"
_ANNOTATION_TEXT = ("/Contents", "/T", "/Subj", "/RC", "/NM")


def output_key(document_id: str, input_sha256: str, template_version: str) -> str:
    """The derivative's identity: the same application, bytes and template version converge on it."""
    return hashlib.sha256(f"{document_id}:{input_sha256}:{template_version}".encode()).hexdigest()


@dataclass
class Rules:
    patterns: list[tuple[str, re.Pattern]]  # (label, pattern)
    fields: dict[str, str]  # fully qualified field name -> label
    regions: dict[int, list[tuple[str, tuple[float, float, float, float]]]]  # page number -> (label, rect)

    @classmethod
    def of(cls, template: dict) -> Rules:
        rules = cls([], {}, {})
        for rule in template["rules"]:
            if "pattern" in rule:
                rules.patterns.append((rule["label"], re.compile(rule["pattern"])))
            elif "field" in rule:
                rules.fields[rule["field"]] = rule["label"]
            else:
                region = rule["region"]
                rules.regions.setdefault(region["page"], []).append((rule["label"], tuple(region["rect"])))
        return rules

    def matches(self, text: str):
        """(label, start, end, value) of every pattern match: the group ``value`` when the pattern names one."""
        for label, pattern in self.patterns:
            for match in pattern.finditer(text):
                group = "value" if "value" in pattern.groupindex else 0
                if match.group(group).strip():
                    yield label, match.start(group), match.end(group), match.group(group)


@dataclass
class Finding:
    """What a first pass found: the values to remove (label each), and per page the glyphs and marks."""

    values: dict[str, str] = field(default_factory=dict)  # value -> label
    counts: Counter = field(default_factory=Counter)  # label -> removed items
    marks: dict[int, list[tuple[float, float, float, float]]] = field(default_factory=dict)  # page index -> boxes

    def add(self, label: str, value: str) -> None:
        value = " ".join(value.split())
        if value:
            self.values.setdefault(value, label)
            self.counts[label] += 1

    def mark(self, page: int, rect) -> None:
        x0, y0, x1, y1 = (float(v) for v in rect)
        self.marks.setdefault(page, []).append(
            (min(x0, x1) - MARK_PADDING, min(y0, y1) - MARK_PADDING, max(x0, x1) + MARK_PADDING,
             max(y0, y1) + MARK_PADDING)
        )


def redact_document(inputs: list[ProcessorInput], options: dict[str, str], pinned: dict) -> ProcessorResult:
    """The real redactor: remove, then mark."""
    return run(inputs, pinned, remove=True)


def run(inputs: list[ProcessorInput], pinned: dict, remove: bool) -> ProcessorResult:
    """Find, remove (unless ``remove`` is False: the overlay-only double the tests keep to show that the second
    pass catches it) and mark."""
    (document,) = inputs
    template, vid = pinned.get("template"), pinned.get("template_version")
    if not isinstance(template, dict) or templates.version_id(template) != vid:
        raise EvidenceError(ReasonCode.TEMPLATE_NOT_IN_EFFECT, "the job's pinned template is not the version it names")
    rules = Rules.of(template)
    document.file.seek(0)
    finding = Finding()
    with readable(), pikepdf.open(document.file) as pdf:
        # Two walks of each page, one page at a time: memory stays that of one page's glyphs (a 300-page
        # application held at once cost ~280 MB), and every page's values are known before any page is rewritten.
        find(pdf, rules, finding)
        occurrences = [
            re.compile(r"\s*".join(re.escape(part) for part in value.split())) for value in sorted(finding.values)
        ]
        for number, page in enumerate(pdf.pages, 1):
            walked = pdftext.walk_page(page)
            removed = _page_glyphs(walked, number, occurrences, rules, finding)
            if remove:
                pdftext.rewrite(walked, removed)
        if remove:
            _remove_elsewhere(pdf, rules, finding)
        _draw_marks(pdf, finding)
        out = io.BytesIO()
        pdf.save(out, deterministic_id=True, compress_streams=True,
                 object_stream_mode=pikepdf.ObjectStreamMode.generate)
    key = output_key(document.document_id, document.sha256, vid)
    outcome = "redacted" if finding.values else "no_matches"
    summary = {
        "outcome": outcome,
        "output_key": key,
        "template_version": vid,
        "removed": dict(sorted(finding.counts.items())),
        "marks": sum(len(boxes) for boxes in finding.marks.values()),
    }
    derivative = f"redacted-{key}.pdf"
    report = {"input": {"document_id": document.document_id, "sha256": document.sha256}, "derivative": derivative}
    return ProcessorResult(
        {derivative: out.getvalue(), REPORT: canonical_json(report | summary) + b"\n"},
        summary,
        {"derivative": derivative, "values": sorted(finding.values), "rules": rules},
    )


@contextlib.contextmanager
def readable():
    """qpdf's own refusals (the gate's parser accepted what qpdf does not) are the input's, not a defect."""
    try:
        yield
    except pikepdf.PdfError as error:
        raise EvidenceError(ReasonCode.REDACTION_UNSUPPORTED_CONTENT,
                            f"qpdf cannot read or write the document ({type(error).__name__})") from None


def find(pdf: pikepdf.Pdf, rules: Rules, finding: Finding) -> None:
    """Every value the rules match anywhere: page text, fields (by name or value), annotations, outlines, metadata.
    A scanned page (images, no text) that no region names is REDACTION_UNSUPPORTED_CONTENT."""
    for number, page in enumerate(pdf.pages, 1):
        walked = pdftext.walk_page(page)
        if walked.images and not walked.text.strip() and number not in rules.regions:
            raise EvidenceError(ReasonCode.REDACTION_UNSUPPORTED_CONTENT,
                                f"page {number} is a scanned image; only a region rule can redact it")
        for label, _, _, value in rules.matches(walked.text):
            finding.add(label, value)
    for name, fld in _fields(pdf):
        value = _text(fld.get("/V"))
        if value is None:
            continue
        if name in rules.fields:
            finding.add(rules.fields[name], value)
        for label, _, _, matched in rules.matches(value):
            finding.add(label, matched)
    strings = [_text(annot.get(key)) for page in pdf.pages for annot in page.get("/Annots", [])
               for key in _ANNOTATION_TEXT]
    strings += [_text(value) for value in pdf.docinfo.values()] + [title for title, _ in _outline_titles(pdf)]
    if "/Metadata" in pdf.Root:
        strings.append(pdf.Root.Metadata.read_bytes().decode("utf-8", errors="replace"))
    for text in filter(None, strings):
        for label, _, _, value in rules.matches(text):
            finding.add(label, value)


def _page_glyphs(page: pdftext.Page, number: int, occurrences: list[re.Pattern], rules: Rules,
                 finding: Finding) -> set[int]:
    """The page's glyphs to remove: every occurrence of every found value (whitespace between its words may
    differ), and what its regions cover. Marks one box per run of removed glyphs on a line."""
    starts = {offset: index for index, offset in enumerate(page.offsets)}
    chosen: set[int] = set()
    for occurrence in occurrences:
        for match in occurrence.finditer(page.text):
            chosen |= {starts[o] for o in range(match.start(), match.end()) if o in starts}
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


def _remove_elsewhere(pdf: pikepdf.Pdf, rules: Rules, finding: Finding) -> None:
    values = list(finding.values)

    def holds(text: str | None) -> bool:
        if not text:
            return False
        flat = " ".join(text.split())
        return any(value in flat for value in values) or any(True for _ in rules.matches(text))

    for number, page in enumerate(pdf.pages):
        for label, rect in rules.regions.get(number + 1, []):
            for covered in _black_out_images(page, rect):
                finding.mark(number, covered)
                finding.counts[label] += 1
    for name, fld in _fields(pdf):
        if name in rules.fields or holds(_text(fld.get("/V"))) or holds(_text(fld.get("/DV"))):
            for key in ("/V", "/DV"):
                if key in fld:
                    del fld[key]
            for widget in _widgets(fld):
                if "/AP" in widget:
                    del widget["/AP"]
                widget.F = 2  # hidden: a viewer drawing the empty field would paint over its mark
                if "/Rect" in widget:
                    finding.mark(_page_of(pdf, widget), widget.Rect)
    for number, page in enumerate(pdf.pages):
        annots = page.get("/Annots")
        if annots is None:
            continue
        kept, dropped = [], set()
        for annot in annots:
            attachment = annot.get("/Subtype") == "/FileAttachment"
            if attachment or (annot.get("/Subtype") != "/Widget"
                              and any(holds(_text(annot.get(key))) for key in _ANNOTATION_TEXT)):
                finding.counts["attachment" if attachment else "annotation"] += 1
                dropped.add(annot.objgen)
                if "/Rect" in annot:
                    finding.mark(number, annot.Rect)
                continue
            kept.append(annot)
        # a removed annotation's popup goes with it (the popup shows the parent's text)
        page.Annots = pikepdf.Array([annot for annot in kept if annot.get("/Subtype") != "/Popup"
                                     or annot.get("/Parent", pikepdf.Dictionary()).objgen not in dropped])
    names = pdf.Root.get("/Names")
    if names is not None and "/EmbeddedFiles" in names:
        finding.counts["attachment"] += len(_name_tree_leaves(names.EmbeddedFiles))
        del names["/EmbeddedFiles"]
    for holder in [pdf.Root, *(page.obj for page in pdf.pages)]:
        if "/AF" in holder:  # associated files (PDF 2.0) name the same file specifications
            del holder["/AF"]
    for key, value in list(pdf.docinfo.items()):
        if holds(_text(value)):
            del pdf.docinfo[key]
            finding.counts["metadata"] += 1
    if "/Metadata" in pdf.Root and holds(pdf.Root.Metadata.read_bytes().decode("utf-8", errors="replace")):
        del pdf.Root["/Metadata"]
        finding.counts["metadata"] += 1
    for title, item in _outline_titles(pdf):
        if holds(title):
            item.Title = pikepdf.String(REDACTED_TITLE)
            finding.counts["bookmark"] += 1
    for key in ("/PieceInfo", "/StructTreeRoot", "/MarkInfo"):  # tagged text copies (ActualText, Alt) go too
        if key in pdf.Root:
            del pdf.Root[key]


def _black_out_images(page: pikepdf.Page, rect) -> list[tuple[float, float, float, float]]:
    """A region's pixels, painted black in every image drawn under it and re-encoded (Flate, 8 bits): the pixels
    are gone from the file, not covered. An image drawn rotated or skewed is blacked out whole; an inline image
    is refused. Returns the page areas blacked out."""
    covered = []
    for image, ctm in pdftext.walk_page(page).images:
        if image is None:
            raise EvidenceError(ReasonCode.REDACTION_UNSUPPORTED_CONTENT, "an inline image under a region")
        placed = pdftext.box(ctm, 0, 0, 1, 1)
        area = (max(placed[0], rect[0]), max(placed[1], rect[1]), min(placed[2], rect[2]), min(placed[3], rect[3]))
        if area[0] >= area[2] or area[1] >= area[3]:
            continue
        pixels = pikepdf.PdfImage(image).as_pil_image()
        pixels = pixels.convert("RGB" if pixels.mode not in ("L", "RGB") else pixels.mode)
        width, height = pixels.size
        if abs(ctm[1]) > 1e-9 or abs(ctm[2]) > 1e-9:
            area, box = placed, (0, 0, width, height)
        else:  # page -> unit square -> pixels (row 0 is the image's top)
            us = sorted(((area[0] - ctm[4]) / ctm[0], (area[2] - ctm[4]) / ctm[0]))
            vs = sorted(((area[1] - ctm[5]) / ctm[3], (area[3] - ctm[5]) / ctm[3]))
            box = (math.floor(us[0] * width), math.floor((1 - vs[1]) * height),
                   math.ceil(us[1] * width), math.ceil((1 - vs[0]) * height))
        ImageDraw.Draw(pixels).rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill=0)
        image.write(zlib.compress(pixels.tobytes()), filter=pikepdf.Name.FlateDecode)
        image.ColorSpace = pikepdf.Name.DeviceGray if pixels.mode == "L" else pikepdf.Name.DeviceRGB
        image.BitsPerComponent = 8
        for key in ("/Decode", "/DecodeParms", "/Mask", "/ImageMask"):
            if key in image:
                del image[key]
        covered.append(area)
    return covered


def _draw_marks(pdf: pikepdf.Pdf, finding: Finding) -> None:
    """Black boxes over what was removed, drawn after the page's own content in default user space."""
    for index, boxes in sorted(finding.marks.items()):
        page = pdf.pages[index]
        page.contents_coalesce()
        drawing = b"".join(f"{x0:.2f} {y0:.2f} {x1 - x0:.2f} {y1 - y0:.2f} re\n".encode() for x0, y0, x1, y1 in boxes)
        content = page.obj.Contents.read_bytes() if "/Contents" in page.obj else b""
        page.obj.Contents = pdf.make_stream(b"q\n" + content + b"\nQ\nq 0 g\n" + drawing + b"f\nQ\n")


def _fields(pdf: pikepdf.Pdf):
    """(fully qualified name, field dictionary) of every terminal form field."""
    acroform = pdf.Root.get("/AcroForm")
    stack = [(item, "") for item in (acroform.get("/Fields", []) if acroform is not None else [])]
    seen = set()
    while stack:
        node, parent = stack.pop()
        if node.objgen in seen and node.objgen != (0, 0):
            continue
        seen.add(node.objgen)
        name = f"{parent}.{_text(node.get('/T'))}" if parent and "/T" in node else _text(node.get("/T")) or parent
        kids = [kid for kid in node.get("/Kids", []) if "/T" in kid]
        if kids:
            stack.extend((kid, name) for kid in kids)
        else:
            yield name, node


def _widgets(fld):
    kids = [kid for kid in fld.get("/Kids", []) if "/T" not in kid]
    return kids or [fld]


def _page_of(pdf: pikepdf.Pdf, widget) -> int:
    for number, page in enumerate(pdf.pages):
        if any(annot.objgen == widget.objgen for annot in page.get("/Annots", [])):
            return number
    return 0


def _outline_titles(pdf: pikepdf.Pdf):
    outlines = pdf.Root.get("/Outlines")
    stack = [outlines.get("/First")] if outlines is not None else []
    seen = set()
    while stack:
        item = stack.pop()
        if item is None or item.objgen in seen:
            continue
        seen.add(item.objgen)
        yield _text(item.get("/Title")) or "", item
        stack.extend([item.get("/Next"), item.get("/First")])


def _name_tree_leaves(tree) -> list:
    leaves, stack = [], [tree]
    while stack:
        node = stack.pop()
        names = list(node.get("/Names", []))
        leaves += names[1::2]
        stack.extend(node.get("/Kids", []))
    return leaves


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
        outcomes=frozenset({ReasonCode.REDACTION_INPUT_MISSING, ReasonCode.REDACTION_UNSUPPORTED_CONTENT,
                            ReasonCode.REDACTION_VERIFICATION_FAILED, ReasonCode.TEMPLATE_NOT_IN_EFFECT}),
    )
)
