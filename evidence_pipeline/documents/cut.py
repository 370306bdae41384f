"""What a page draws across regions of it, found in its content so that it can be cut out (redact.py burns the
rendering of what was there, the regions black, in its place: destroyed, never covered).

A page's own content stream is walked instruction by instruction with its graphics state (the matrix, the clip's
bounds, the line width): each object it draws has bounds in default user space, and one whose bounds meet a region
is cut whole:

- a glyph (pdftext's walk; the text beside it stays, the line does not move): only its glyph, not its line;
- a path (its construction and painting instructions; a path that also clips keeps its clip, painted by ``n``);
- an image (``Do``, or inline), a form XObject (``Do``: the form is left as it is, for wherever else it is drawn,
  and its placement here is cut whole with its bounding box), a shading (``sh``: the clip's bounds);
- the choice of a pattern (``scn``, ``SCN``) that nothing left paints with (redact.py then drops it, and every
  image, form and shading the content no longer names, from the page's own resources).

Bounds are conservative (a curve's control points, a stroke's width at its widest), so a cut may take more than
the region, never less; redact.py renders the cut page and falls back to burning the whole page if any ink is left
in a region.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pikepdf

from evidence_pipeline.documents import pdftext

Box = tuple[float, float, float, float]
_PATH = {"m": 2, "l": 2, "c": 6, "v": 4, "y": 4, "h": 0, "re": 4}  # construction operator -> operands
_PAINT = {"S", "s", "f", "F", "f*", "B", "B*", "b", "b*", "n"}
_STROKE = {"S", "s", "B", "B*", "b", "b*"}
_FILL_COLOUR = {"g", "rg", "k", "sc", "scn", "cs"}
_STROKE_COLOUR = {"G", "RG", "K", "SC", "SCN", "CS"}


@dataclass
class Cut:
    """What to take out of a page's content: glyphs (pdftext indices), instructions of the page stream (index ->
    what replaces it), the bounds of everything taken, and the patterns that what stays still paints with."""

    glyphs: set[int] = field(default_factory=set)
    instructions: dict[tuple[int, int], list] = field(default_factory=dict)
    areas: list[Box] = field(default_factory=list)
    patterns: set[str] = field(default_factory=set)


def across(walked: pdftext.Page, resources, regions: list[Box], page: Box) -> Cut:
    """Everything the page's own content (``walked.streams[0]``) draws whose bounds meet one of ``regions`` (default
    user space); ``page`` bounds what a shading fills."""
    cut = Cut()
    for index, glyph in enumerate(walked.glyphs):
        if glyph.stream == 0 and meets(glyph.box, regions):
            cut.glyphs.add(index)
            cut.areas.append(glyph.box)
    _, instructions = walked.streams[0]
    shown: dict[int, set[int]] = {}  # text-showing instruction -> its glyphs
    for index, glyph in enumerate(walked.glyphs):
        if glyph.stream == 0:
            shown.setdefault(glyph.op, set()).add(index)
    ctm, clip, width = pdftext.IDENTITY, page, 1.0
    fill = stroke = None  # the pattern the fill and the stroke colour name, if any
    chosen: dict[int, str] = {}  # instruction -> the pattern it chooses
    stack: list[tuple] = []
    start, points, clipping = None, [], False
    xobjects = resources.get("/XObject", {}) if isinstance(resources, pikepdf.Dictionary) else {}

    def take(first: int, last: int, bounds: Box | None, keep_clip: bool = False, paints=()) -> None:
        bounds = _within(bounds, clip) if bounds is not None else None
        if bounds is None or not meets(bounds, regions):
            cut.patterns.update(name for name in paints if name is not None)
            return
        for index in range(first, last + 1):
            cut.instructions[(0, index)] = []
        if keep_clip:  # the path stays, as a clip, painting nothing
            for index in range(first, last):
                del cut.instructions[(0, index)]
            cut.instructions[(0, last)] = [([], pikepdf.Operator("n"))]
        cut.areas.append(bounds)

    for index, (operands, operator) in enumerate(instructions):
        op = str(operator)
        if isinstance(operands, pikepdf.PdfInlineImage) or op == "INLINE IMAGE":
            take(index, index, pdftext.box(ctm, 0, 0, 1, 1), paints=(fill,))  # a stencil mask paints the fill
        elif op == "q":
            stack.append((ctm, clip, width, fill, stroke))
        elif op == "Q" and stack:
            ctm, clip, width, fill, stroke = stack.pop()
        elif op in _FILL_COLOUR:
            fill = _pattern(op, operands, index, chosen)
        elif op in _STROKE_COLOUR:
            stroke = _pattern(op, operands, index, chosen)
        elif op in pdftext.SHOW:
            if not shown.get(index, set()) <= cut.glyphs:  # text that stays paints with both colours
                cut.patterns.update(name for name in (fill, stroke) if name is not None)
        elif op == "cm":
            ctm = pdftext.multiply(tuple(float(v) for v in operands), ctm)
        elif op == "w":
            width = float(operands[0])
        elif op in _PATH:
            start = index if start is None else start
            points += _points(op, [float(v) for v in operands[: _PATH[op]]], ctm)
        elif op in ("W", "W*"):
            clipping = True
        elif op in _PAINT:
            if points:
                bounds = _bounds(points)
                if op in _STROKE:  # half the width each side; miters reach further: the whole width
                    grow = width * max(abs(v) for v in ctm[:4]) or 1.0
                    bounds = (bounds[0] - grow, bounds[1] - grow, bounds[2] + grow, bounds[3] + grow)
                if op != "n":
                    take(
                        start if start is not None else index,
                        index,
                        bounds,
                        keep_clip=clipping,
                        paints=(stroke if op in _STROKE else None, fill if op not in ("S", "s") else None),
                    )
                if clipping:
                    clip = _within(_bounds(points), clip) or (0.0, 0.0, 0.0, 0.0)
            start, points, clipping = None, [], False
        elif op == "sh":
            take(index, index, clip)
        elif op == "Do" and operands and isinstance(xobjects, pikepdf.Dictionary):
            xobject = xobjects.get(str(operands[0]))
            if not isinstance(xobject, pikepdf.Stream):
                continue
            if xobject.get("/Subtype") == "/Image":
                take(index, index, pdftext.box(ctm, 0, 0, 1, 1), paints=(fill,))
            elif xobject.get("/Subtype") == "/Form":
                matrix = tuple(float(v) for v in xobject.get("/Matrix", pdftext.IDENTITY))
                x0, y0, x1, y1 = (float(v) for v in xobject.get("/BBox", [0, 0, 0, 0]))
                take(index, index, pdftext.box(pdftext.multiply(matrix, ctm), x0, y0, x1, y1), paints=(fill, stroke))
    for index, name in chosen.items():  # a pattern nothing that stays paints with is not chosen either
        if name not in cut.patterns:
            cut.instructions[(0, index)] = []
    return cut


def _pattern(op: str, operands, index: int, chosen: dict[int, str]) -> str | None:
    """The pattern a colour operator chooses (``scn`` or ``SCN`` naming one), noted in ``chosen``, or None."""
    if op in ("scn", "SCN") and operands and isinstance(operands[-1], pikepdf.Name):
        chosen[index] = str(operands[-1])
        return chosen[index]
    return None


def meets(box: Box, regions: list[Box]) -> bool:
    """Whether ``box`` overlaps one of ``regions``."""
    return any(max(box[0], r[0]) < min(box[2], r[2]) and max(box[1], r[1]) < min(box[3], r[3]) for r in regions)


def _within(box: Box, clip: Box) -> Box | None:
    inside = (max(box[0], clip[0]), max(box[1], clip[1]), min(box[2], clip[2]), min(box[3], clip[3]))
    return inside if inside[0] < inside[2] and inside[1] < inside[3] else None


def _points(op: str, values: list[float], ctm) -> list[tuple[float, float]]:
    if op == "re":
        x, y, w, h = values
        values = [x, y, x + w, y, x, y + h, x + w, y + h]
    return [
        (x * ctm[0] + y * ctm[2] + ctm[4], x * ctm[1] + y * ctm[3] + ctm[5]) for x, y in zip(values[0::2], values[1::2])
    ]


def _bounds(points: list[tuple[float, float]]) -> Box:
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return min(xs), min(ys), max(xs), max(ys)
