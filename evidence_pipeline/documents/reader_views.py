"""What a reader can make a page show beyond the one view the passes render, for the second pass (redaction_check).

pdfium renders each page once: its crop box, the optional content its default configuration shows, the
annotations shown on screen in their selected appearance, in grey. A reader also sees, with no tool but a viewer or
poppler: every optional-content layer (a viewer's layers panel, or the print state), the annotations that only print,
an annotation's rollover and down appearances (hover, press) and its other states (a check box clicked), the media
box beyond the crop box (pdftoppm and pdftotext show the media box), and colour: text whose colour has the grey level
of what lies under it (red on a dark grey) is invisible in grey and plain in colour.

``every_view`` writes a copy of the derivative (pypdf: nothing of the first pass's pikepdf) that shows all of it at
once: optional content is dropped (every layer drawn), print-only annotations are shown, and pages are appended:
per page, one per alternate appearance of its annotations (the k-th of each, drawn alone) and, where the crop box is
smaller than the media box, one of the media box with the crop box whitened. The appended pages come after the
original ones, so the first pass's painted boxes keep their page indices, and each appended page is drawn in its
original's user space (the first pass maps what it reads there back onto the original: ``Appended``).
``contrast_readings`` reads the tinted and coloured areas of each page by their local contrast in every colour
channel. Both passes read these views: the second pass to judge, the first (redact.py) to remove what they show.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Iterator
from typing import NamedTuple

import numpy
import pypdfium2
from PIL import Image
from pypdf import PdfReader, PdfWriter, apply_configuration
from pypdf.generic import (
    ArrayObject,
    DecodedStreamObject,
    DictionaryObject,
    FloatObject,
    NameObject,
    NumberObject,
    StreamObject,
)

from evidence_pipeline.documents import ocr
from evidence_pipeline.documents.gate import LIMITS
from evidence_pipeline.documents.matching import Search
from evidence_pipeline.monthly.validate import PDFIUM_LOCK

_NO_VIEW = 32  # annotation flag: printed, not shown on screen
_CHROMA = 96  # a colour whose channels differ by this much is a hue (a scan's paper tint differs by less)
_CELL = 8  # pixels at INK_DPI (2 millimetres): a square this wide of one tone is a ground, not a stroke
_GRAIN = 16  # levels: a square whose pixels spread (standard deviation) this little in every channel is of one tone
_GROUND = 32  # pixels at PAGE_DPI: the square whose median is a pixel's ground (wider than a stroke)
_STRIP = 8 * _GROUND  # rows of a page whose contrast is found at once
_DEPARTS = 64  # levels of a channel: a pixel this far from its ground is ink
_MARGIN = 96  # pixels at PAGE_DPI read above and below the coloured area: the lines a value continues on


class Appended(NamedTuple):
    """What an appended page of ``every_view`` shows: the original page's (by index) alternate appearances
    (``ALTERNATES``) or its media box beyond its crop box (``MEDIA_BOX``), in that page's user space."""

    page: int
    kind: str


ALTERNATES, MEDIA_BOX = "alternates", "media_box"


def every_view(data: bytes) -> tuple[bytes, list[Appended]]:
    """The derivative as one document showing everything a reader can make its pages show (``data`` itself when
    it shows nothing more than its default view), and what each page appended after the original ones shows."""
    with apply_configuration(**LIMITS):
        reader = PdfReader(io.BytesIO(data))
        if not _has_more(reader):
            return data, []
        writer = PdfWriter(clone_from=reader)
    writer.root_object.pop(NameObject("/OCProperties"), None)
    originals, appended = list(writer.pages), []
    for index, page in enumerate(originals):
        annotations = [a.get_object() for a in page.get("/Annots", ArrayObject())]
        for annotation in annotations:
            flags = int(annotation.get("/F", 0))
            if flags & _NO_VIEW:
                annotation[NameObject("/F")] = NumberObject(flags & ~_NO_VIEW)
        alternates = [_alternates(annotation) for annotation in annotations]
        for k in range(max(map(len, alternates), default=0)):
            extra = writer.add_blank_page(float(page.mediabox.width), float(page.mediabox.height))
            _frame_like(extra, page)
            extra[NameObject("/Annots")] = ArrayObject(
                writer._add_object(_stamp(annotation, shown[k]))
                for annotation, shown in zip(annotations, alternates)
                if len(shown) > k
            )
            appended.append(Appended(index, ALTERNATES))
        if _area(page.cropbox) < _area(page.mediabox):
            _media_box_page(writer, page)
            appended.append(Appended(index, MEDIA_BOX))
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue(), appended


def _has_more(reader: PdfReader) -> bool:
    if "/OCProperties" in reader.trailer["/Root"]:
        return True
    for page in reader.pages:
        if _area(page.cropbox) < _area(page.mediabox):
            return True
        for annotation in page.get("/Annots", ArrayObject()):
            annotation = annotation.get_object()
            if int(annotation.get("/F", 0)) & _NO_VIEW or _alternates(annotation):
                return True
    return False


def _alternates(annotation: DictionaryObject) -> list[StreamObject]:
    """The appearances a reader can bring up beside the one shown: rollover and down, and every state not
    selected."""
    appearances = annotation.get("/AP")
    if not isinstance(appearances, DictionaryObject):
        return []
    shown = annotation.get("/AS")
    found = []
    for key in ("/N", "/R", "/D"):
        entry = appearances.get(key)
        entry = entry.get_object() if entry is not None else None
        if isinstance(entry, StreamObject):
            found += [entry] if key != "/N" else []
        elif isinstance(entry, DictionaryObject):
            found += [
                state.get_object()
                for name, state in entry.items()
                if (key != "/N" or name != shown) and isinstance(state.get_object(), StreamObject)
            ]
    return found


def _stamp(annotation: DictionaryObject, appearance: StreamObject) -> DictionaryObject:
    """A stamp at the annotation's place drawing ``appearance`` as its only appearance."""
    return DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Annot"),
            NameObject("/Subtype"): NameObject("/Stamp"),
            NameObject("/Rect"): annotation.get("/Rect", ArrayObject()),
            NameObject("/F"): NumberObject(4),
            NameObject("/AP"): DictionaryObject({NameObject("/N"): appearance.indirect_reference or appearance}),
        }
    )


def _frame_like(extra, page) -> None:
    extra[NameObject("/MediaBox")] = page.mediabox
    extra[NameObject("/CropBox")] = page.cropbox
    if page.get("/Rotate"):
        extra[NameObject("/Rotate")] = NumberObject(int(page["/Rotate"]))


def _media_box_page(writer: PdfWriter, page) -> None:
    """The page's media box shown, its crop box (which the page itself shows) painted white over its content."""
    extra = writer.add_page(page.clone(writer, force_duplicate=True))
    extra[NameObject("/CropBox")] = ArrayObject(FloatObject(v) for v in page.mediabox)
    crop = [float(v) for v in page.cropbox]
    white = DecodedStreamObject()
    white.set_data(b"Q q 1 g %f %f %f %f re f Q" % (crop[0], crop[1], crop[2] - crop[0], crop[3] - crop[1]))
    opening = DecodedStreamObject()
    opening.set_data(b"q")
    contents = extra.get("/Contents")
    contents = contents.get_object() if contents is not None else ArrayObject()
    streams = list(contents) if isinstance(contents, ArrayObject) else [contents.indirect_reference or contents]
    extra[NameObject("/Contents")] = ArrayObject([writer._add_object(opening), *streams, writer._add_object(white)])


def _area(box) -> float:
    return abs(float(box.width) * float(box.height))


def contrast_holding(data: bytes, search: Search, tinted: dict[int, tuple[int, int]]) -> int:
    """Pages whose tinted or coloured area, read by its contrast (``contrast_readings``), holds a value or a rule's
    match."""
    return sum(any(search.holds(view) for view in reading.views) for _, reading in contrast_readings(data, tinted))


def contrast_readings(data: bytes, tinted: dict[int, tuple[int, int]]) -> Iterator[tuple[int, ocr.Reading]]:
    """(index, reading) of each page with a ``tinted`` area (``tinted_area`` of the page as ocr.shown_pages
    renders it): the area read as its local contrast in any colour channel, its words' boxes in the pixels of the
    page's rendering at PAGE_DPI. The page's own reading is in grey, by an engine that takes a flat tint for a
    picture: dark text on a light grey panel goes unread, and text whose colour has the grey level of its ground
    (red on dark grey) is invisible in grey. Here each pixel is ink where a channel departs from its
    neighbourhood's median (dark text on a light panel, light text on a dark one, a hue on an equally grey
    ground)."""
    with PDFIUM_LOCK:
        document = pypdfium2.PdfDocument(data)
        try:
            document.init_forms()
            for index, area in sorted(tinted.items()):
                page = document[index]
                try:
                    image = ocr.render_colour(page, ocr.PAGE_DPI)
                finally:
                    page.close()
                scale = ocr.PAGE_DPI / ocr.INK_DPI
                top = max(0, round(area[0] * scale) - _MARGIN)
                bottom = min(image.shape[0], round(area[1] * scale) + _MARGIN)
                contrast = _contrast(image[top:bottom])
                del image  # three bytes a pixel, not held while the contrast is read
                yield index, ocr.read_page(contrast).below(top)
        finally:
            document.close()


def _contrast(image: numpy.ndarray) -> Image.Image:
    """Black where any channel departs by _DEPARTS from its ground (the median of the square of _GROUND pixels
    the pixel is in: a panel's or a page's flat colour, which glyphs' strokes cover less than half of), else
    white. A strip of squares at a time: a whole A1 page's differences took over a gigabyte."""
    height, width = image.shape[:2]
    columns = -(-width // _GROUND)
    contrast = numpy.empty((height, width), dtype=numpy.uint8)
    for top in range(0, height, _STRIP):
        strip = image[top : top + _STRIP]
        rows = -(-strip.shape[0] // _GROUND)
        padded = numpy.pad(
            strip, ((0, rows * _GROUND - strip.shape[0]), (0, columns * _GROUND - width), (0, 0)), mode="edge"
        )
        squares = padded.reshape(rows, _GROUND, columns, _GROUND, 3)
        ground = numpy.median(squares, axis=(1, 3)).astype(numpy.int16)
        ground = ground.repeat(_GROUND, axis=0).repeat(_GROUND, axis=1)[: strip.shape[0], :width]
        departs = (numpy.abs(strip.astype(numpy.int16) - ground) >= _DEPARTS).any(axis=2)
        contrast[top : top + _STRIP] = numpy.where(departs, 0, 255)
    return Image.fromarray(contrast)


def tinted_area(pixels: numpy.ndarray) -> tuple[int, int] | None:
    """The first and last rows of a page's ``pixels`` (RGB at INK_DPI, its trusted text hidden: that text's layer
    is matched as it is, and a typed page leaves nothing to look at) holding a ground or coloured ink, or None. A
    ground is a cell of _CELL pixels on a side of one tone, flat or grainy (its pixels spread by _GRAIN or less in
    every channel), that is neither white nor black (a panel, a tint, a photograph's sky or shadow, film grain and
    all; not the strokes of text, whose pixels are ink and paper); coloured ink is any pixel of a hue, strokes
    included (yellow text on white is nearly white in grey), so a coloured ground is one too. Channel by channel
    in numpy: reduced over a pixel's three channels, numpy took more time than the rest of both passes over a
    typed page (ocr.shown_pages leaves no pixels to look at where its trusted text is all a page draws)."""
    channels = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    chroma = functools.reduce(numpy.maximum, channels) - functools.reduce(numpy.minimum, channels)
    rows = (chroma >= _CHROMA).any(axis=1)
    grey = numpy.asarray(Image.fromarray(pixels).reduce(_CELL), dtype=numpy.int16).mean(axis=2)
    tinted = (grey > 40) & (grey < 235)
    for channel in channels:  # of one tone in every channel; text's strokes spread in the first already
        if not tinted.any():
            break
        tinted[tinted] = _spread(channel, tinted) <= _GRAIN
    grounds = numpy.repeat(tinted.any(axis=1), _CELL)[: len(rows)]  # cells' rows, as pixel rows
    rows[: len(grounds)] |= grounds
    found = numpy.flatnonzero(rows)
    return (int(found[0]), int(found[-1]) + 1) if len(found) else None


def _spread(channel: numpy.ndarray, cells: numpy.ndarray) -> numpy.ndarray:
    """The standard deviation of the pixels of each of the ``cells`` (a mask over the grid of _CELL squares, the
    last row and column of squares cut short by the channel's edge), in the mask's order: only the cells asked
    for are computed (a typed page has few or none)."""
    height, width = channel.shape
    rows, columns = cells.shape
    padded = numpy.pad(channel, ((0, rows * _CELL - height), (0, columns * _CELL - width)), mode="edge")
    squares = padded.reshape(rows, _CELL, columns, _CELL).transpose(0, 2, 1, 3)[cells]
    return squares.reshape(len(squares), -1).std(axis=1)
