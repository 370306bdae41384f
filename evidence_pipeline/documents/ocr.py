"""Text as a reader sees it, read by Tesseract (Debian's `tesseract-ocr` and its language data, through pytesseract):
in images, and on whole pages rendered by pdfium, in the languages the job's template names (``reading_in``;
English by default).

Both passes of a redaction read every page as rendered, OCR reading only what its trusted text layer does not
explain (``shown_pages``, ``read_page``), and every image as
decoded (``read``), each decoding the image pixels with its own library (pikepdf in the first, pypdf in the
second). A reading holds the words with their boxes in the image's own pixel coordinates and says whether the
image could be read with confidence: words that look like text but that the engine doubts must not outnumber one in
ten of the words. An image is read upright, or in the right-angle turn that reads best; a page is read so, and
then the ink that reading left (text at any other angle, text it could not make out) is found region by region and
read turned by the angle its lines run at, a region still doubted again at its other likely angle and squeezed along
its lines; a region where nothing like text was read with confidence again as the engine skips it (``_unread``:
dots joined, its line's gaps between glyphs narrowed; small print enlarged, and refused where only doubt is read);
light text on a dark panel is read negative; a page with rules (a table's) is read again without them.
No size or angle of an object is judged: only the page's pixels.
What born-digital pages were refused over, and is no longer (issue 46), each without reading less of the page: an
image pikepdf cannot decode is read as pdfium decodes it where a page draws it (``pdfium_decoded``: the pixels a
reader sees; one neither decodes is still refused); a rule's pixels where a glyph's stroke crosses it stay in the
page read without rules (``_unruled``: struck-through text is read whole, not as halves the engine doubts; that
reading is in addition to the one with the rules); the first pass's own black marks are cleared whatever touches
them (``_cleared``: dark pixels of boxes it drew over removed text, which show nothing; one holding light ink is
left to be read). Nothing of these excuses a doubted word. One does: a doubted word that is the page's trusted
text layer (``Layer``: its glyphs' loose boxes cover half the word's box, and the page without that text draws
nothing there that holds a glyph), read in a band because other ink is near (small print between a table's rules);
that layer spells it and the rules match on it. Ink of anything else there leaves the word doubted.
Tesseract runs single-threaded (the worker's parallelism is Dagster's), one process per reading, and its temporary
files are pytesseract's own (0600, deleted after each call).

Over 400 lines because finding the ink a page's trusted text layer leaves to read (``shown_pages``: trusted fonts,
ink bands) and reading that ink (turns, regions, legibility) share one pixel grid, one set of thresholds and one
word model; apart, each would restate the other's.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import io
import math
import os
import re
import subprocess
from collections.abc import Iterable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

import numpy
import pikepdf
import pypdfium2
import pypdfium2.raw as pdfium_c
import pytesseract
from PIL import Image, ImageDraw, ImageFilter
from pypdf._codecs import adobe_glyphs

from evidence_pipeline.documents import budgets
from evidence_pipeline.documents.matching import UNSPACED, name_str, unspaced, wrapped
from evidence_pipeline.documents.pdfwalk import first_visit
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.monthly.validate import PDFIUM_LOCK

os.environ.setdefault("OMP_THREAD_LIMIT", "1")

CONFIDENT = 60  # Tesseract's word confidence (0-100) at and above which a word is trusted
PAGE_DPI = 300  # pages are rendered and read at this resolution: 10-point text is 40 pixels tall
MIN_GLYPH = 8  # pixels at PAGE_DPI (under 2 points): ink smaller on both sides is no glyph a reader reads
_ROTATIONS = (0, 90, 180, 270)
_CELL = 8  # pixels of the page per cell of the grid in which the ink an upright reading left is grouped
_JOIN = 3  # cells: ink this close belongs to one region (the gaps between glyphs, words and lines of a block)
_SKEW_SIDE = 200  # pixels: the longer side a region is shrunk to while the angle of its lines is estimated
_PEAKS = 2  # angles a region's lines may run at: the likeliest read first, the others where it reads doubted
_APART = 10  # degrees between two of those angles (a peak's shoulder is the same angle)
_SQUEEZES = (1 / 2, 1 / 3)  # widths along its lines at which a doubted region is read again (glyphs drawn 1.5 to
# 6 times wide read at a reader's proportions; the engine reads twice as wide with confidence)
_JOINERS = frozenset("-@._/")  # a word ending or beginning with one continues into its neighbour
_SOLID = 25  # pixels at PAGE_DPI: dark throughout a square this wide is a box, not a stroke of a glyph
_PANEL = 0.4  # a dark area holding light ink is a panel (read negative) when dark over this much of its box
_RULE = PAGE_DPI  # pixels: a straight line of ink an inch long or longer, and ...
_RULE_WIDTH = 12  # ... at most this thick (3 points), is a rule: a table's border, a gridline, an underline
_ROWS = 256  # rows of a mask whose running sums are taken at once: a whole A1 page's took over a gigabyte
_JOINING = (1, 3)  # pixels: the blurs (Gaussian radii) that join a dot-matrix print's dots, a few pixels apart
_ENLARGED = (2, 3)  # scales at which small print is read again: capitals 5 pixels tall read, in doubt
_SMALL_PRINT = 12  # pixels at PAGE_DPI: lines of ink no taller than this (3-point text) may be small print
_SMALL_GLYPH = 5  # pixels: a line of small print read no shorter than this (capitals 5 pixels tall; a speck is none)
_SMALL_WORD = 4  # letters or digits: a doubted reading of small print this long may be a value
_STROKE = 3  # dark pixels in a cell of _CELL: a stroke of a glyph crosses it
_SPACED_LINE = 120  # pixels at PAGE_DPI: a region no taller than this may be a line of letters spaced apart
_DOTS = 2  # pixels: a line's gaps up to twice this are closed (a dotted or dashed rule is one line)
_GAP = 40  # white pixels between the regions laid out for one reading
_SHEET = 32_000  # pixels on a side of what the regions are laid out on: the engine reads up to 32,767
_SHEET_PIXELS = 100_000_000  # and in all (an A4 page's sheet is at most 82 million): an A1 poster's sheet of
# regions, as wide as the poster, could not be made within the worker's memory limit
INK_DPI = 100  # the page with its trusted text hidden is rendered at this resolution to find the ink left to read
INK = 245  # grey level under which a pixel is ink (faint grey and light colour included)
_GROUP = 4  # pixels at INK_DPI per cell of the grid in which ink is grouped (ink a cell apart is one group)
_MARGIN = 96  # pixels at PAGE_DPI read above and below a group: the lines before and after it (a value wrapped)
# The base-14 fonts whose glyphs every renderer draws from its own copy (Symbol and ZapfDingbats draw no letters)
_STANDARD = frozenset(
    f"{family}{style}"
    for family, styles in (
        ("Helvetica", ("", "-Bold", "-Oblique", "-BoldOblique")),
        ("Courier", ("", "-Bold", "-Oblique", "-BoldOblique")),
        ("Times", ("-Roman", "-Bold", "-Italic", "-BoldItalic")),
    )
    for style in styles
)
_FONT = object()  # an entry of a /Font resource dictionary
_PATTERN = pikepdf.Dictionary()  # a resource dictionary's patterns, among the fonts
_ENCODINGS = frozenset({"/StandardEncoding", "/WinAnsiEncoding", "/MacRomanEncoding"})
LANGUAGES = ("eng",)  # what a template that names no languages reads in
_NOT_LANGUAGES = frozenset({"osd"})  # Tesseract's orientation data: installed beside the languages, reads no text
_SLUG = re.compile(r"^[a-z][a-z_]{0,15}$")  # a language name a message may repeat
# the languages the current pass reads in, joined as Tesseract takes them; set by ``reading_in``
_READING_IN: ContextVar[str] = ContextVar("ocr_languages", default="+".join(LANGUAGES))


@dataclass(frozen=True)
class Word:
    text: str
    box: tuple[int, int, int, int]  # left, top, right, bottom in the image's pixels (row 0 at the top)
    confidence: float
    line: int  # the line the engine read it on (in the orientation it was read in)


@dataclass(frozen=True)
class Reading:
    words: tuple[Word, ...]
    legible: bool

    def below(self, top: int) -> Reading:
        """The reading of an image that lies ``top`` rows down a larger one, its words' boxes in the larger's."""
        return Reading(
            tuple(
                Word(w.text, (w.box[0], w.box[1] + top, w.box[2], w.box[3] + top), w.confidence, w.line)
                for w in self.words
            ),
            self.legible,
        )

    @property
    def lines(self) -> str:
        """The words as the engine read them: a line of the image per line of text, words joined by a space."""
        lines: dict[int, list[str]] = {}
        for word in self.words:
            lines.setdefault(word.line, []).append(word.text)
        return "\n".join(" ".join(words) for words in lines.values())

    @property
    def views(self) -> tuple[str, ...]:
        """The text as a rule reads it: line by line; the lines joined (a value wrapped at a line's end); with
        the words a reader sees as one written together: on a line less than a third of their height apart, joined
        by a separator that ends or begins one of them (a value drawn in two neighbouring objects), or both in a
        script written without spaces (Chinese, Japanese, which the engine reads as words a character or a few long:
        ``matching.UNSPACED``); and that with the lines of such a script joined (``matching.unspaced``). Gaps and
        heights are measured along the line, from one word towards the next: on a page read turned (by the engine or
        here), a line runs down or up the image, not across it. And the first and the last with each line that ends
        in a hyphen joined to the next, the hyphen kept and dropped (matching.wrapped)."""
        tight, previous = [], None
        for word in self.words:
            if previous is not None:
                same = previous.line == word.line
                gap, height = _along(previous, word)
                joined = (
                    gap < height / 3
                    or previous.text[-1] in _JOINERS
                    or word.text[0] in _JOINERS
                    or bool(UNSPACED.match(previous.text[-1]) and UNSPACED.match(word.text[0]))
                )
                tight.append("" if same and joined else " " if same else "\n")
            tight.append(word.text)
            previous = word
        tight = "".join(tight)
        lines = self.lines
        return lines, " ".join(lines.split("\n")), tight, *wrapped(lines), *wrapped(tight), *unspaced(tight)


def _along(first: Word, second: Word) -> tuple[float, float]:
    """(gap, height) of two words of one line, measured along the line (the direction from the first's centre to
    the second's) and across it (the smaller of the two)."""
    dx = (second.box[0] + second.box[2] - first.box[0] - first.box[2]) / 2
    dy = (second.box[1] + second.box[3] - first.box[1] - first.box[3]) / 2
    length = math.hypot(dx, dy) or 1.0
    ux, uy = dx / length, dy / length
    spans = []
    for word in (first, second):
        corners = [(x, y) for x in (word.box[0], word.box[2]) for y in (word.box[1], word.box[3])]
        along, across = [x * ux + y * uy for x, y in corners], [y * ux - x * uy for x, y in corners]
        spans.append((min(along), max(along), max(across) - min(across)))
    return spans[1][0] - spans[0][1], min(spans[0][2], spans[1][2])


@functools.cache
def engine() -> str:
    """The engine and its version, for the derivative's report (a new engine may read an image differently)."""
    return f"tesseract {pytesseract.get_tesseract_version()}"


@functools.cache
def _tessdata() -> tuple[str, frozenset[str]]:
    """The folder of the engine's data and the languages installed there (``tesseract --list-langs``); none where
    the engine is not installed (every language is then unavailable, a refusal with its code)."""
    try:
        listed = subprocess.run(["tesseract", "--list-langs"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "", frozenset()
    first, *names = listed.splitlines()
    return first.split('"')[1], frozenset(name.strip() for name in names) - _NOT_LANGUAGES


def installed_languages() -> frozenset[str]:
    return _tessdata()[1]


def checked_languages(languages: Sequence[str]) -> tuple[str, ...]:
    """``languages`` when each is a language whose data the engine has (OCR_LANGUAGE_UNAVAILABLE otherwise: a
    template approved where the data was installed, run by a worker without it, is refused, never read in
    English instead)."""
    installed = installed_languages()
    for language in languages:
        if language not in installed:
            name = repr(language) if isinstance(language, str) and _SLUG.fullmatch(language) else "a language"
            raise EvidenceError(
                ReasonCode.OCR_LANGUAGE_UNAVAILABLE,
                f"the OCR engine has no data for {name} (installed: {', '.join(sorted(installed)) or 'none'})",
            )
    return tuple(languages)


@contextlib.contextmanager
def reading_in(languages: Sequence[str]) -> Iterator[None]:
    """Every reading inside reads in ``languages`` (checked): both passes of a job read with its template's."""
    token = _READING_IN.set("+".join(checked_languages(languages)))
    try:
        yield
    finally:
        _READING_IN.reset(token)


def language_data(languages: Sequence[str]) -> dict[str, str]:
    """The sha256 of each language's data, for the derivative's report: with the engine's version, what says that
    a reading can be repeated (Debian's packages of the data are versioned apart from the engine)."""
    return {language: _data_digest(language) for language in checked_languages(languages)}


@functools.cache
def _data_digest(language: str) -> str:
    digest = hashlib.sha256()
    with open(os.path.join(_tessdata()[0], f"{language}.traineddata"), "rb") as data:
        for chunk in iter(lambda: data.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def rendered_pages(
    data: bytes, only: set[int] | None = None, colour: bool = False
) -> Iterator[tuple[int, Image.Image]]:
    """(index, image) of each page (or of the pages ``only`` names) as a reader sees it: rendered by pdfium at
    PAGE_DPI, in grey unless ``colour``, with its annotations and its form fields' appearances, turned as its
    /Rotate says. One page in memory at a time."""
    with PDFIUM_LOCK:
        document = pypdfium2.PdfDocument(data)
        try:
            document.init_forms()
            for index in range(len(document)):
                if only is not None and index not in only:
                    continue
                page = document[index]
                try:
                    bitmap = page.render(
                        scale=PAGE_DPI / 72, may_draw_forms=True, draw_annots=True, grayscale=not colour
                    )
                    image = bitmap.to_pil().convert("RGB" if colour else "L")
                    bitmap.close()
                finally:
                    page.close()
                yield index, image
        finally:
            document.close()


def pdfium_decoded(data: bytes, encoded: bytes) -> Image.Image | None:
    """The image whose encoded bytes these are, as pdfium decodes it where a page draws it (forms entered): what a
    reader sees of an image the passes' own decoders cannot decode (a Separation colour space, a JPEG libjpeg
    stops in, a CCITT parameter); None where no page draws it or pdfium cannot decode it either."""
    with PDFIUM_LOCK:
        document = pypdfium2.PdfDocument(data)
        try:
            for page in document:
                try:
                    for obj in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE]):
                        if bytes(obj.get_data(decode_simple=False)) == encoded:
                            return obj.get_bitmap(render=False).to_pil()
                except pypdfium2.PdfiumError:
                    return None
                finally:
                    page.close()
        finally:
            document.close()
    return None


@dataclass(frozen=True)
class Shown:
    """What of a rendered page its text layer does not explain, read by OCR."""

    size: tuple[int, int]  # the page rendered at PAGE_DPI, in pixels (the words' boxes are in them)
    reading: Reading
    bands: int  # bands of the page read (none: every glyph the page shows is its text layer's)
    # the page at INK_DPI in colour with its trusted text hidden (reader_views reads its tints); None where that
    # draws nothing, or nothing but the boxes the first pass painted (a typed page), which leaves no tint to find
    ink: numpy.ndarray | None


def shown_pages(data: bytes, painted: dict[int, list] | None = None) -> Iterator[tuple[int, Shown]]:
    """(index, Shown) of each page: the ink its verified text layer does not explain, read as a reader reads it.

    The page is rendered by pdfium at INK_DPI, annotations and form appearances drawn, with the text of trusted
    fonts (``trusted_fonts``) hidden: that text's layer spells what it draws, and the passes match rules on it.
    What ink remains (images, vector paths, patterns, shadings, annotations, text of any other font) is grouped;
    a group that cannot hold a glyph at its drawn size (under MIN_GLYPH at PAGE_DPI on a side: a rule line) is
    skipped; every other group is read by OCR (``read_page``: any angle) in a band across the page from _MARGIN
    above it to _MARGIN below, rendered at PAGE_DPI with everything drawn, so a value split between the text
    layer and ink beside it, or wrapped onto the next line, is read whole. The boxes the first pass painted black
    (``painted``: page index -> boxes in the rendering's pixels at PAGE_DPI, as it recorded them) are the only dark
    areas not read: never a dark area the page itself draws. One page in memory at a time."""
    trusted = trusted_fonts(data)
    with PDFIUM_LOCK:
        document = pypdfium2.PdfDocument(data)
        try:
            document.init_forms()
            for index in range(len(document)):
                page = document[index]
                try:
                    yield index, _shown(page, trusted, (painted or {}).get(index, ()))
                finally:
                    page.close()
        finally:
            document.close()


def _shown(page: pypdfium2.PdfPage, trusted: frozenset[bytes], painted) -> Shown:
    width, height = page.get_size()  # as shown: turned as the page's /Rotate says
    size = (round(width * PAGE_DPI / 72), round(height * PAGE_DPI / 72))
    if size[0] * size[1] > budgets.MAX_READ_PIXELS:
        raise budgets.exceeded(
            f"a page to redact of more than {budgets.MAX_READ_PIXELS:,} pixels at {PAGE_DPI} dpi (larger than A1)",
            "send it with its pages at most A1 in size (docs: Document limits)",
        )
    hidden, fonts = [], {}  # (object, its rendering mode); font handle -> trusted
    for obj in page.get_objects():
        if obj.type != pdfium_c.FPDF_PAGEOBJ_TEXT:
            continue
        font = pdfium_c.FPDFTextObj_GetFont(obj.raw)
        key = ctypes.cast(font, ctypes.c_void_p).value
        if key not in fonts:
            fonts[key] = _trusted_font(font, trusted)
        mode = pdfium_c.FPDFTextObj_GetTextRenderMode(obj.raw)
        if fonts[key] and mode in (
            pdfium_c.FPDF_TEXTRENDERMODE_FILL,
            pdfium_c.FPDF_TEXTRENDERMODE_STROKE,
            pdfium_c.FPDF_TEXTRENDERMODE_FILL_STROKE,
        ):  # clipping text changes what else shows
            hidden.append((obj, mode))
            pdfium_c.FPDFTextObj_SetTextRenderMode(obj.raw, pdfium_c.FPDF_TEXTRENDERMODE_INVISIBLE)
    try:
        grey = _render(page, INK_DPI)
        drawn = _drawn(grey, painted)
        # in colour only where anything else is drawn, for its tints: a typed page's colour rendering and its
        # conversion to grey cost more than pdfium's rendering in grey
        ink = render_colour(page, INK_DPI) if drawn.any() else None
    finally:
        for obj, mode in hidden:
            pdfium_c.FPDFTextObj_SetTextRenderMode(obj.raw, mode)
    if ink is None:  # nothing drawn but the trusted text and the painted boxes (a typed page)
        return Shown(size, Reading((), True), 0, None)
    bands = _bands(drawn, size[1])
    if bands:  # each band widened to the blank rows around it: no line of text is read cut in half
        blank = ~(numpy.asarray(_render(page, INK_DPI)) < INK).any(axis=1)
        bands = _merged([_widened(band, blank, size[1]) for band in bands])
    if not bands:
        return Shown(size, Reading((), True), 0, ink)
    top, bottom = bands[0][0], bands[-1][1]
    rendered = _render(page, PAGE_DPI)  # whole (pdfium's crop is in the unrotated page's frame)
    pixels = numpy.asarray(rendered.crop((0, top, rendered.width, bottom))).copy()
    del rendered  # held no longer than needed: a poster's is 70 MB
    for (_, above), (below, _) in zip(bands, bands[1:]):  # the rows between bands are not read
        pixels[above - top : below - top] = 255
    textpage = page.get_textpage()
    try:
        known = sum(len(_object_text(obj, textpage).split()) for obj, _ in hidden)
        layer = Layer(_glyph_boxes(page, textpage, hidden, size, top), grey, top)
    finally:
        textpage.close()
    painted = [(lt, tp - top, rt, bm - top) for lt, tp, rt, bm in painted]
    reading = read_page(Image.fromarray(pixels), known, painted, layer)
    return Shown(size, reading.below(top), len(bands), ink)


@dataclass(frozen=True)
class Layer:
    """Where a page's trusted text layer draws its glyphs, for a reading of rows of its rendering at PAGE_DPI from
    ``top`` down: their boxes in the reading's pixels, and ``ink``, the page rendered at INK_DPI with that text
    hidden (what else it draws)."""

    glyphs: list[tuple[int, int, int, int]]
    ink: Image.Image
    top: int

    def explains(self, word: Word) -> bool:
        """Whether a word is the layer's text (which spells what it draws, and on which the rules match): its
        glyphs cover at least half of the word's box, and the page without them draws nothing there that could
        hold a glyph (``_bands``: a rule or a table's border crossing it holds none). Ink of anything else there
        (an image, an outline, text of another font), under, over or beside the layer's glyphs, leaves it doubted."""
        if not _explained(word, self.glyphs):
            return False
        scale = INK_DPI / PAGE_DPI
        left, top, right, bottom = word.box
        box = (math.floor(left * scale), math.floor((top + self.top) * scale))
        box += (max(box[0] + 1, math.ceil(right * scale)), max(box[1] + 1, math.ceil((bottom + self.top) * scale)))
        return not _bands(_drawn(self.ink.crop(box)), bottom - top)


def _glyph_boxes(page, textpage, hidden: list, size: tuple[int, int], top: int) -> list[tuple[int, int, int, int]]:
    """The loose boxes (the line's ascent and descent, the glyph's advance) of the characters of the ``hidden``
    text objects, in the pixels of the page's rendering at ``size`` less the ``top`` rows above a reading."""
    objects = {ctypes.cast(obj.raw, ctypes.c_void_p).value for obj, _ in hidden}
    boxes, rect = [], pdfium_c.FS_RECTF()
    for index in range(pdfium_c.FPDFText_CountChars(textpage.raw)):
        obj = ctypes.cast(pdfium_c.FPDFText_GetTextObject(textpage.raw, index), ctypes.c_void_p).value
        if obj in objects and pdfium_c.FPDFText_GetLooseCharBox(textpage.raw, index, rect):
            left, upper, right, lower = device_box(page, size, (rect.left, rect.bottom, rect.right, rect.top))
            boxes.append((left, upper - top, right, lower - top))
    return boxes


def device_box(page: pypdfium2.PdfPage, size: tuple[int, int], box) -> tuple[int, int, int, int]:
    """A box of the page (left, bottom, right, top) in the pixels of its rendering at ``size``, as pdfium places
    it (crop box, /Rotate)."""
    corners = []
    for x, y in ((box[0], box[1]), (box[2], box[3])):
        px, py = ctypes.c_int(), ctypes.c_int()
        pdfium_c.FPDF_PageToDevice(page.raw, 0, 0, size[0], size[1], 0, x, y, ctypes.byref(px), ctypes.byref(py))
        corners.append((px.value, py.value))
    (ax, ay), (bx, by) = corners
    return min(ax, bx), min(ay, by), max(ax, bx), max(ay, by)


def _render(page: pypdfium2.PdfPage, dpi: int) -> Image.Image:
    bitmap = page.render(scale=dpi / 72, may_draw_forms=True, draw_annots=True, grayscale=True)
    try:
        return bitmap.to_pil().convert("L")
    finally:
        bitmap.close()


def render_colour(page: pypdfium2.PdfPage, dpi: int) -> numpy.ndarray:
    """The page in RGB, straight into an array: through Pillow's conversions it cost more than pdfium's rendering
    of a typed page."""
    bitmap = page.render(scale=dpi / 72, may_draw_forms=True, draw_annots=True, rev_byteorder=True)
    try:
        return numpy.array(bitmap.to_numpy()[..., :3])
    finally:
        bitmap.close()


def _drawn(gray: Image.Image, painted=()) -> numpy.ndarray:
    """The ink of ``gray`` (at INK_DPI) to read: every pixel under INK but the boxes the first pass painted black
    (``painted``, in pixels at PAGE_DPI), and only their dark pixels: light ink drawn on one still is
    (``_unpainted``); a dark area the document draws is read like any other ink (it may hold light text, or sit
    against text a reader reads)."""
    pixels = numpy.asarray(gray)
    return _unpainted(pixels < INK, pixels, painted)


def _bands(ink: numpy.ndarray, height: int) -> list[tuple[int, int]]:
    """(top, bottom) rows at PAGE_DPI of the bands to read: around each group of ``ink`` (``_drawn``, at INK_DPI)
    that is MIN_GLYPH or more on both sides at PAGE_DPI, _MARGIN above and below; overlapping bands merged."""
    if not ink.any():
        return []
    scale = PAGE_DPI / INK_DPI
    rows, columns = -(-ink.shape[0] // _GROUP), -(-ink.shape[1] // _GROUP)
    ink = numpy.pad(ink, ((0, rows * _GROUP - ink.shape[0]), (0, columns * _GROUP - ink.shape[1])))
    cells = _per_cell(ink, numpy.maximum)
    bands = []
    for top, left, bottom, right in _components(_grown(cells, 1)):
        group = ink[top * _GROUP : (bottom + 1) * _GROUP, left * _GROUP : (right + 1) * _GROUP]
        inked_rows, inked_columns = numpy.flatnonzero(group.any(axis=1)), numpy.flatnonzero(group.any(axis=0))
        if (
            not len(inked_rows)
            or (inked_rows[-1] - inked_rows[0] + 1) * scale < MIN_GLYPH
            or (inked_columns[-1] - inked_columns[0] + 1) * scale < MIN_GLYPH
        ):
            continue  # no glyph fits in it at its drawn size
        first, last = top * _GROUP + inked_rows[0], top * _GROUP + inked_rows[-1] + 1
        bands.append((max(0, math.floor(first * scale) - _MARGIN), min(height, math.ceil(last * scale) + _MARGIN)))
    return _merged(bands)


def _unpainted(ink: numpy.ndarray, pixels: numpy.ndarray, painted) -> numpy.ndarray:
    """The ink less each painted box (a box at PAGE_DPI, here at INK_DPI) and the pixel around it (its
    anti-aliased edge); inside it, a pixel lighter than the box (under 64) is ink: drawn on it after it."""
    ink = ink.copy()
    scale = INK_DPI / PAGE_DPI
    inside = []
    for left, top, right, bottom in painted:
        ink[
            max(0, math.floor(top * scale) - 1) : math.ceil(bottom * scale) + 1,
            max(0, math.floor(left * scale) - 1) : math.ceil(right * scale) + 1,
        ] = False
        inside.append(
            (
                slice(math.ceil(top * scale) + 1, math.floor(bottom * scale) - 1),
                slice(math.ceil(left * scale) + 1, math.floor(right * scale) - 1),
            )
        )
    for area in inside:  # after every box is taken out: boxes may overlap
        ink[area] |= pixels[area] >= 64
    return ink


def _per_cell(pixels: numpy.ndarray, pick) -> numpy.ndarray:
    """``pick`` (numpy.minimum or numpy.maximum) over each _GROUP x _GROUP cell, by strided slices (fast)."""
    across = functools.reduce(pick, (pixels[:, k::_GROUP] for k in range(_GROUP)))
    return functools.reduce(pick, (across[k::_GROUP] for k in range(_GROUP)))


def _widened(band: tuple[int, int], blank: numpy.ndarray, height: int) -> tuple[int, int]:
    """The band (rows at PAGE_DPI) grown to the nearest blank row (at INK_DPI) above and below it."""
    scale = PAGE_DPI / INK_DPI
    top, bottom = min(len(blank) - 1, int(band[0] / scale)), min(len(blank), math.ceil(band[1] / scale))
    while top > 0 and not blank[top]:
        top -= 1
    while bottom < len(blank) and not blank[bottom - 1]:
        bottom += 1
    return math.floor(top * scale), min(height, math.ceil(bottom * scale))


def _merged(bands: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for top, bottom in sorted(bands):
        if merged and top <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], bottom))
        else:
            merged.append((top, bottom))
    return merged


def _trusted_font(font, trusted: frozenset[bytes]) -> bool:
    """Whether a text object's font is trusted and pdfium draws it from its own copy (not embedded)."""
    if not font or pdfium_c.FPDFFont_GetIsEmbedded(font):
        return False
    length = pdfium_c.FPDFFont_GetBaseFontName(font, None, 0)
    name = ctypes.create_string_buffer(length)
    pdfium_c.FPDFFont_GetBaseFontName(font, name, length)
    return name.value in trusted


def _object_text(obj, textpage) -> str:
    length = pdfium_c.FPDFTextObj_GetText(obj.raw, textpage.raw, None, 0)
    buffer = ctypes.create_string_buffer(length)
    pdfium_c.FPDFTextObj_GetText(obj.raw, textpage.raw, ctypes.cast(buffer, ctypes.POINTER(ctypes.c_ushort)), length)
    return buffer.raw.decode("utf-16-le", errors="ignore").rstrip("\x00")


def trusted_fonts(data: bytes) -> frozenset[bytes]:
    """The names of the fonts whose text layer spells what they draw, so that their text needs no OCR: a base-14
    font of letters (not embedded: every renderer draws it from its own copy), with a standard encoding whose
    differences name only glyphs of the Adobe glyph list, and no ToUnicode map (which could say anything). A name
    that any other font in the file also bears is not trusted (a renderer tells fonts apart by name only). In a
    file with a pattern no font is trusted: text filled or stroked with a pattern shows the pattern's content."""
    good, bad = set(), set()
    with pikepdf.open(io.BytesIO(data)) as pdf:
        for font in _fonts(pdf):
            if font is _PATTERN:
                return frozenset()
            name = font.get("/BaseFont")
            name = name_str(name)[1:].encode("utf-8", "surrogateescape") if isinstance(name, pikepdf.Name) else b""
            (good if _spells_what_it_draws(font) else bad).add(name)
    return frozenset(good - bad)


def fonts(pdf: pikepdf.Pdf) -> Iterator[pikepdf.Dictionary]:
    """Every font dictionary reachable from the trailer, each once: what a page can draw with (a font no object
    refers to, left behind by an editor, draws nothing)."""
    return (font for font in _fonts(pdf) if font is not _PATTERN)


def _fonts(pdf: pikepdf.Pdf) -> Iterator[pikepdf.Dictionary]:
    """Every font dictionary reachable from the trailer (an entry of a /Font resource dictionary, or /Type /Font),
    each indirect object entered once; _PATTERN for a resource dictionary's patterns."""
    seen: set[tuple[int, int]] = set()
    stack: list = [(None, pdf.trailer)]  # (the key it is the value of, or _FONT for an entry of a font map; value)
    while stack:
        key, value = stack.pop()
        if not first_visit(value, seen):
            continue
        if isinstance(value, pikepdf.Array):
            stack.extend((None, item) for item in value)
            continue
        if key == "/Pattern" and isinstance(value, pikepdf.Dictionary) and len(value):
            yield _PATTERN
        font_map = key == "/Font" and value.get("/Type") != "/Font"  # a resource dictionary's fonts, by name
        if key is _FONT or value.get("/Type") == "/Font":
            yield value
        stack.extend((_FONT if font_map else k, value[k]) for k in value.keys())


def _spells_what_it_draws(font: pikepdf.Dictionary) -> bool:
    if font.get("/Subtype") not in ("/Type1", "/MMType1", "/TrueType") or "/ToUnicode" in font:
        return False
    if not isinstance(font.get("/BaseFont"), pikepdf.Name) or name_str(font.BaseFont)[1:] not in _STANDARD:
        return False
    descriptor = font.get("/FontDescriptor")
    if isinstance(descriptor, pikepdf.Dictionary) and any(
        k in descriptor for k in ("/FontFile", "/FontFile2", "/FontFile3")
    ):
        return False
    encoding = font.get("/Encoding")
    if encoding is None or isinstance(encoding, pikepdf.Name):
        return encoding is None or name_str(encoding) in _ENCODINGS
    if not isinstance(encoding, pikepdf.Dictionary):
        return False
    if name_str(encoding.get("/BaseEncoding", pikepdf.Name.StandardEncoding)) not in _ENCODINGS:
        return False
    differences = encoding.get("/Differences", pikepdf.Array())
    return isinstance(differences, pikepdf.Array) and all(
        isinstance(item, int) or isinstance(item, pikepdf.Name) and name_str(item) in adobe_glyphs
        for item in differences
    )


def read(image: Image.Image) -> Reading:
    """An image's words, read upright or, when upright does not read, in the right-angle turn that reads best;
    dark on light, as a page is (``_cleared``: a mask's white text on black is read negative)."""
    shown = image.convert("L")
    gray = _cleared(shown)
    best = _turned(gray, shown, _words(gray, 0))
    return Reading(tuple(best), _legible(best, shown))


def _turned(
    gray: Image.Image, shown: Image.Image, upright: list[Word], explained=(), known: int = 0, *, layer=None
) -> list[Word]:
    """The upright words, or, when they are not legible, those of the right-angle turn that reads best (a scan
    made sideways or upside down)."""
    best = upright
    if not _legible(upright, shown, explained, known, layer):
        for angle in _ROTATIONS[1:]:
            turned = _words(gray, angle)
            if _score(turned) > _score(best):
                best = turned
    return best


def read_page(image: Image.Image, known: int = 0, painted=(), layer: Layer | None = None) -> Reading:
    """A rendered page's words: the page read upright; then the ink that reading did not read with confidence,
    region by region, each region turned so that its lines run level (and upside down, in case they ran the other
    way), all laid out in one image and read at once (``_regions_read``). Dark panels are read negative and the
    inside of solid dark areas (black boxes) and the dark pixels of the boxes the first pass painted (``painted``,
    in the image's pixels) are cleared before it is read (``_cleared``). Not legible where small print was read
    only in doubt however enlarged (``_misread``); else legible unless the
    upright reading's doubted words, less those the regions' reading read with confidence, are more than one in ten
    of the words (with the ``known`` words of the page's trusted text layer, which is not read; a doubted word that
    is that ``layer``'s text is read: ``Layer.explains``); then the page is read turned as ``read`` turns an
    image."""
    shown = image if image.mode == "L" else image.convert("L")  # already grey: not copied (a poster is 70 MB)
    gray = _cleared(shown, painted)
    upright = _words(gray, 0)
    regions, misread = _regions_read(gray, upright, layer)
    judged, words, explained, read = gray, upright, regions, upright + regions
    unruled = _unruled(gray)
    if unruled is not None:  # rules glue to the words beside them, read as words, or hide a table's words: read
        # again without them, judged so; the first reading's words are kept (a glyph whose strokes are rules)
        base = max((word.line for word in read), default=-1) + 1
        judged = unruled
        words = [Word(w.text, w.box, w.confidence, base + w.line) for w in _words(unruled, 0)]
        again, misread_again = _regions_read(unruled, words, layer)
        explained, misread = read + again, misread or misread_again
        read = read + words + again
    if misread:  # small print the engine reads only in doubt, however enlarged: no turn of the page reads it
        return Reading(tuple(read), False)
    if _legible(words, shown, explained, known, layer):
        return Reading(tuple(read), True)
    page = _turned(judged, shown, words, explained, known, layer=layer)
    if page is words:
        return Reading(tuple(read), False)
    return Reading(tuple(page), _legible(page, shown, known=known, layer=layer))


def _unruled(gray: Image.Image) -> Image.Image | None:
    """The image with its rules made white (None when it has none): straight lines of ink _RULE long or longer,
    dotted or solid, and _RULE_WIDTH thick at most, across or down, with the pixel around them; where a glyph's
    stroke crosses a rule (ink on both sides of it, across it: text struck through, an underline through the
    descenders) the rule's pixels stay, so the glyph is read whole and not cut in two. Light shading (lighter than
    200) is no ink of a rule, and a dark area thicker than a rule (a box, a panel) stays. A glyph's stroke is
    shorter than an inch unless the glyph is over an inch tall, and the page is read so only in addition to its
    reading with the rules: a glyph read only so is a glyph read."""
    dark = numpy.asarray(gray) < 200
    found = []  # (in place where it can be: a whole A1 page's masks are 70 MB each)
    for axis in (1, 0):
        line = _runs(_closed(dark, _DOTS, axis), _RULE, axis)
        numpy.greater(line, _runs(line, _RULE_WIDTH + 1, 1 - axis), out=line)  # less what is thicker than a rule
        found.append(_grown(line, 1))
    level, upright = found
    rules = level | upright
    if not rules.any():
        return None
    strokes = numpy.greater(dark, rules, out=dark)  # dark & ~rules
    level &= _crossed(level, strokes)
    upright &= _crossed(upright.T, strokes.T).T
    numpy.greater(rules, level | upright, out=rules)  # rules & ~crossed
    pixels = numpy.asarray(gray).copy()
    pixels[rules] = 255
    return Image.fromarray(pixels)


def _crossed(band: numpy.ndarray, strokes: numpy.ndarray) -> numpy.ndarray:
    """The pixels of level ``band`` whose column holds a stroke on both sides of it: the first pixel outside the
    band above and the first below are ``strokes`` (row by row: linear in the pixels)."""
    above, below = numpy.zeros_like(band), numpy.zeros_like(band)
    for row in range(1, band.shape[0]):
        above[row] = numpy.where(band[row - 1], above[row - 1], strokes[row - 1])
    for row in range(band.shape[0] - 2, -1, -1):
        below[row] = numpy.where(band[row + 1], below[row + 1], strokes[row + 1])
    above &= below
    return above


def _runs(mask: numpy.ndarray, length: int, axis: int) -> numpy.ndarray:
    """The pixels of ``mask`` in a run of at least ``length`` set pixels along ``axis`` (1: across, 0: down): an
    opening by a line, by running sums (linear in the pixels)."""

    def across(rows: numpy.ndarray) -> numpy.ndarray:
        if rows.shape[1] < length:
            return numpy.zeros_like(rows)
        total = numpy.pad(numpy.cumsum(rows, axis=1, dtype=numpy.int32), ((0, 0), (1, 0)))
        starts = (total[:, length:] - total[:, :-length]) == length  # the run of ``length`` from here is all set
        started = numpy.pad(numpy.cumsum(starts, axis=1, dtype=numpy.int32), ((0, 0), (1, 0)))
        at = numpy.arange(rows.shape[1])
        last, first = numpy.minimum(at, starts.shape[1] - 1) + 1, numpy.maximum(at - length + 1, 0)
        return started[:, last] - started[:, first] > 0  # some such run covers the pixel

    return _row_by_row(across, mask, axis)


def _closed(mask: numpy.ndarray, radius: int, axis: int) -> numpy.ndarray:
    """``mask`` with its gaps along ``axis`` up to 2 * ``radius`` pixels filled: a dilation then an erosion."""

    def across(rows: numpy.ndarray) -> numpy.ndarray:
        at = numpy.arange(rows.shape[1])
        first, last = numpy.maximum(at - radius, 0), numpy.minimum(at + radius, rows.shape[1] - 1) + 1
        total = numpy.pad(numpy.cumsum(rows, axis=1, dtype=numpy.int32), ((0, 0), (1, 0)))
        grown = total[:, last] - total[:, first] > 0
        total = numpy.pad(numpy.cumsum(grown, axis=1, dtype=numpy.int32), ((0, 0), (1, 0)))
        return total[:, last] - total[:, first] == last - first

    return _row_by_row(across, mask, axis)


def _row_by_row(across, mask: numpy.ndarray, axis: int) -> numpy.ndarray:
    """``across`` (of a block of rows, along them) of ``mask`` along ``axis`` (1: across, 0: down), _ROWS rows at
    a time: its running sums (four bytes a pixel, several at once) take a block's memory, not a page's."""
    rows = mask if axis == 1 else mask.T
    done = numpy.empty(rows.shape, dtype=bool)
    for start in range(0, rows.shape[0], _ROWS):
        done[start : start + _ROWS] = across(numpy.ascontiguousarray(rows[start : start + _ROWS]))
    return done if axis == 1 else done.T


def _regions_read(gray: Image.Image, page: list[Word], layer: Layer | None = None) -> tuple[list[Word], bool]:
    """The words of the ink ``page`` did not read with confidence, read region by region at their own angle (and
    upside down), and whether small print among it was read only in doubt. A region whose reading is still doubted
    (a doubted word there that no confident word explains) is read again (``_again``), and so is one where nothing
    was read with confidence: ink the engine reads as no word at all is not legible by default. One where nothing
    that looks like text was read with confidence is read again too, in variants made for what the engine skips
    (``_skipped``), on a sheet of their own, and its small print enlarged (``_enlarged``) on another, whose reading
    ``_misread`` judges. Pieces are made as their sheet is read: all of a dense poster's at once took more memory
    than a worker has."""
    residue = gray.copy()
    draw = ImageDraw.Draw(residue)
    for word in page:
        if word.confidence >= CONFIDENT:
            draw.rectangle(word.box, fill=255)
    found = [(region, residue.crop(region)) for region in _ink_regions(residue)]
    angles = [_skews(crop) for _, crop in found]
    base = max((word.line for word in page), default=-1) + 1
    read, base = _pieces_read(
        (
            _piece(region, crop, turn)
            for (region, crop), skews in zip(found, angles)
            for turn in (skews[0], skews[0] + 180)
        ),
        base,
    )
    words = [word for piece in read for word in piece]
    trusted = _trusted(page + words)
    doubted, unread = [], []
    for index, ((region, crop), skews) in enumerate(zip(found, angles)):
        upright, upside_down = read[2 * index], read[2 * index + 1]
        inside = [word for word in page + upright + upside_down if _overlap(word.box, region)]
        confident = any(word.confidence >= CONFIDENT for word in inside) and not any(
            _doubted(word) and not _explained(word, trusted) for word in inside
        )
        if not confident or not _trusted(inside):  # as the engine skips: no text-like word read with confidence
            unread.append((region, crop))
        if not confident:  # (ink of which nothing was read with confidence is read again)
            best = skews[0] + 180 if _score(upside_down) > _score(upright) else skews[0]
            doubted.append((region, crop, skews, best))
    for pieces in (_again(gray, doubted), _skipped(gray, unread)):
        read, base = _pieces_read(pieces, base)
        words += [word for piece in read for word in piece]
    read, base = _pieces_read(_enlarged(unread), base)
    enlarged = [word for piece in read for word in piece]
    words += enlarged
    return words, _misread(enlarged, _trusted(page + words), gray, layer)


def _again(gray: Image.Image, doubted: list) -> Iterator[tuple]:
    """The pieces in which each doubted region (region, crop, the angles its lines may run at, the turn that read
    it best) is read again: at the other angles its lines may run at (``_skews``: a short word's glyphs stand in
    columns that compete with its line) and, at the angle that read it best, squeezed or stretched along its lines
    (_SQUEEZES: text drawn stretched by its matrix or Tz, which the engine doubts, read at a reader's proportions);
    at each angle, both ways, scaled along its lines to the proportions of its strokes (``_proportion``: stretched
    or condensed by any factor); and its line across the image, once, at its proportions."""
    lines = set()
    for region, crop, skews, best in doubted:
        yield from (_piece(region, crop, best, squeeze) for squeeze in _SQUEEZES)
        yield from (_piece(region, crop, turn) for angle in skews[1:] for turn in (angle, angle + 180))
        for angle in skews:  # at each angle, both ways: the turn that read best may be the wrong one
            scale = _proportion(crop, angle)
            yield from (_piece(region, crop, turn, scale) for turn in (angle, angle + 180) if scale != 1)
        line = (0, region[1], gray.width, region[3])  # its line across the image, as drawn: glyphs drawn very wide
        if line in lines:  # stand apart in regions of their own, a word read with confidence among them
            continue
        lines.add(line)
        wide = gray.crop(line)
        scale = _proportion(wide, 0)
        if scale < 1:
            yield from (_piece(line, wide, turn, scale) for turn in (0, 180))


def _skipped(gray: Image.Image, unread: list) -> Iterator[tuple]:
    """The pieces in which regions (region, crop) where nothing that looks like text was read with confidence are
    read again: each with its dots joined (``_unread``), then across their lines, those lines with the blank
    columns between glyphs narrowed (``_narrowed``: letters spaced apart, which the engine reads alone or not at
    all)."""
    for region, crop in unread:
        yield from _unread(region, crop)
    for top, bottom in _merged([(region[1], region[3]) for region, _ in unread]):
        if bottom - top <= _SPACED_LINE:
            yield _narrowed((0, top, gray.width, bottom), gray.crop((0, top, gray.width, bottom)))


def _enlarged(unread: list) -> Iterator[tuple]:
    """The pieces in which small print among regions (region, crop) where nothing that looks like text was read
    with confidence is read again: a region whose lines (runs of rows holding ink) are at most _SMALL_PRINT tall,
    enlarged _ENLARGED times (glyphs a few pixels tall, which the engine reads as no word)."""
    for region, crop in unread:
        lines = _median_run((numpy.asarray(crop) < 128).any(axis=1)[numpy.newaxis])  # runs of rows holding ink
        if lines and lines <= _SMALL_PRINT:
            for scale in _ENLARGED:
                scale = min(scale, (_SHEET - 2 * _GAP) / crop.width)  # a sheet's width at most
                yield _piece(region, crop, 0, scale, scale)


def _misread(enlarged: list[Word], trusted: list, gray: Image.Image, layer: Layer | None) -> bool:
    """Whether small print read enlarged was read only in doubt: a doubted word of a line of small print (wider than
    tall, _SMALL_GLYPH tall or more, and no taller than half again _SMALL_PRINT: not a speck, a stroke, a table's
    column of digits or a shape read across the region's lines) long enough to be a value (_SMALL_WORD letters or
    digits) that no word read with confidence (``trusted``, any reading's) explains, as ``_legible`` judges a
    doubted word (a black box's is none; one that is the trusted text ``layer`` is read). The engine misreads such
    print at any enlargement: no reading says what it spells."""
    return any(
        _SMALL_GLYPH <= word.box[3] - word.box[1] <= min(1.5 * _SMALL_PRINT, word.box[2] - word.box[0])
        and sum(c.isalnum() for c in word.text) >= _SMALL_WORD
        and _unread_doubt(word, gray, trusted, layer)
        for word in enlarged
    )


def _proportion(crop: Image.Image, turn: float) -> float:
    """The scale along its lines that gives the region turned ``turn`` a reader's proportions: its strokes' runs
    of ink as long along its lines as across them (text drawn stretched or condensed by its matrix or Tz, at any
    factor, which the engine reads as nothing or doubts); 1 when they are within half again of each other."""
    turned = crop.rotate(turn, expand=True, fillcolor=255)
    ink = numpy.asarray(turned) < 128
    along, across = _median_run(ink), _median_run(ink.T)
    if not along or not across or 2 / 3 <= along / across <= 3 / 2:
        return 1.0
    return min(across / along, (_SHEET - 2 * _GAP) / turned.width)  # a sheet's width at most


def _median_run(ink: numpy.ndarray) -> float:
    """The median length of the runs of ink along the rows of ``ink``, _ROWS rows at a time (the positions of a
    whole poster's runs took more memory than its pixels)."""
    lengths = []
    for top in range(0, ink.shape[0], _ROWS):
        steps = numpy.diff(numpy.pad(ink[top : top + _ROWS], ((0, 0), (1, 1))).astype(numpy.int8), axis=1)
        starts, ends = numpy.nonzero(steps == 1)[1], numpy.nonzero(steps == -1)[1]
        lengths.append((ends - starts).astype(numpy.int32))
    runs = numpy.concatenate(lengths) if lengths else numpy.zeros(0, dtype=numpy.int32)
    return float(numpy.median(runs)) if len(runs) else 0.0


def _piece(region: tuple[int, int, int, int], crop: Image.Image, turn: float, squeeze=1.0, across=1.0) -> tuple:
    """(region, turn, where each of the piece's columns and rows lies in the turned region, the region's size, its
    size turned, the piece as laid out): the region's pixels turned ``turn`` degrees counter-clockwise, then scaled
    ``squeeze`` along its (now level) lines and ``across`` them."""
    turned = crop.rotate(turn, expand=True, fillcolor=255)
    size = (max(1, round(turned.width * squeeze)), max(1, round(turned.height * across)))
    piece = turned if size == turned.size else turned.resize(size, Image.Resampling.LANCZOS)
    spread = (_spread(turned.width, size[0]), _spread(turned.height, size[1]))
    return region, turn, spread, crop.size, turned.size, piece


def _spread(length: int, scaled: int) -> numpy.ndarray:
    """Where each of ``scaled`` pixels lies among ``length``."""
    return numpy.minimum((numpy.arange(scaled) + 0.5) * length / scaled, length - 1).astype(int)


def _unread(region: tuple[int, int, int, int], crop: Image.Image) -> Iterator[tuple]:
    """Pieces of a region in which the engine read nothing that looks like text with confidence, made for what it
    reads as no word: dots and broken strokes joined (``_joined``: a dot-matrix print). Its line is read narrowed
    too, once for all such regions on it (``_narrowed``, by ``_skipped``)."""
    return (_piece(region, _joined(crop, radius), 0) for radius in _JOINING)


def _joined(crop: Image.Image, radius: int) -> Image.Image:
    """The crop blurred ``radius`` pixels, then every pixel under 200 made black: dots about twice as far apart join."""
    return crop.filter(ImageFilter.GaussianBlur(radius)).point(lambda v: 0 if v < 200 else 255)


def _narrowed(line: tuple[int, int, int, int], crop: Image.Image) -> tuple:
    """A piece of ``crop`` (its ``line``'s pixels) with the runs of blank columns between its glyphs shortened
    alike, the median to a quarter of the height of its ink: glyphs set several widths apart sit as a word's
    letters do, and a wider gap (between words) stays wider."""
    pixels = numpy.asarray(crop)
    dark = pixels < 128
    inked, rows = numpy.flatnonzero(dark.any(axis=0)), numpy.flatnonzero(dark.any(axis=1))
    keep = numpy.arange(crop.width)
    gaps = numpy.diff(inked) - 1 if len(inked) else numpy.array([], dtype=int)
    if len(rows) and (gaps > 0).any():
        factor = float(numpy.median(gaps[gaps > 0])) / max(2, (rows[-1] - rows[0] + 1) // 4)
        if factor > 1:
            keep = numpy.concatenate(
                [numpy.arange(inked[0])]
                + [
                    numpy.concatenate(([start], start + 1 + numpy.arange(round(gap / factor))))
                    for start, gap in zip(inked[:-1], gaps)
                ]
                + [numpy.arange(inked[-1], crop.width)]
            )
    piece = Image.fromarray(pixels[:, keep])
    return line, 0, (keep, numpy.arange(crop.height)), crop.size, crop.size, piece


def _pieces_read(pieces: Iterable, base: int) -> tuple[list[list[Word]], int]:
    """The words of each piece, in its region's pixels, their lines numbered from ``base``; and the next line
    number. The pieces are read on as few sheets as the engine takes, each made when its sheet is laid out."""
    read: list[list[Word]] = []
    for sheet in _sheets(pieces):
        first = len(read)
        read += [[] for _ in sheet]
        words = _sheet_read(sheet)
        for index, word in words:
            read[first + index].append(Word(word.text, word.box, word.confidence, base + word.line))
        base += max((word.line for _, word in words), default=-1) + 1
    return read, base


def _sheets(pieces: list) -> Iterator[list]:
    """The pieces in runs whose sheet (stacked, _GAP apart) stays within what the engine reads on a side, and
    within _SHEET_PIXELS unless one piece alone is larger."""
    run: list = []
    height, width = _GAP, 0
    for piece in pieces:
        size = piece[-1].height + _GAP
        if max(piece[-1].width + 2 * _GAP, size + _GAP) > _SHEET:
            raise EvidenceError(
                ReasonCode.REDACTION_UNSUPPORTED_CONTENT,
                f"a region of ink larger than OCR reads ({_SHEET:,} pixels on a side at "
                f"{PAGE_DPI} dpi); only a region rule can redact it",
            )
        wider = max(width, piece[-1].width + 2 * _GAP)
        if run and (height + size > _SHEET or wider * (height + size) > _SHEET_PIXELS):
            yield run
            run, height, wider = [], _GAP, piece[-1].width + 2 * _GAP
        run.append(piece)
        height, width = height + size, wider
    if run:
        yield run


def _sheet_read(pieces: list) -> list[tuple[int, Word]]:
    """The pieces laid out one under another on one sheet, read at once: each word with the index of its piece,
    in its region's pixels."""
    width = max(piece.width for *_, piece in pieces) + 2 * _GAP
    sheet = Image.new("L", (width, sum(piece.height + _GAP for *_, piece in pieces) + _GAP), 255)
    tops = []
    top = _GAP
    for *_, piece in pieces:
        sheet.paste(piece, (_GAP, top))
        tops.append(top)
        top += piece.height + _GAP
    words = []
    for word in _words(sheet, 0):
        centre = (word.box[1] + word.box[3]) / 2
        index = max(i for i, t in enumerate(tops) if t <= centre) if centre >= tops[0] else 0
        region, turn, (columns, rows), size, turned, _ = pieces[index]
        left, right = (int(numpy.clip(x - _GAP, 0, len(columns) - 1)) for x in (word.box[0], word.box[2] - 1))
        top, bottom = (int(numpy.clip(y - tops[index], 0, len(rows) - 1)) for y in (word.box[1], word.box[3] - 1))
        local = (int(columns[left]), int(rows[top]), int(columns[right]) + 1, int(rows[bottom]) + 1)
        box = _unturn(local, turn, size, turned)
        words.append(
            (
                index,
                Word(
                    word.text,
                    (box[0] + region[0], box[1] + region[1], box[2] + region[0], box[3] + region[1]),
                    word.confidence,
                    word.line,
                ),
            )
        )
    return words


def _cleared(gray: Image.Image, painted=()) -> Image.Image:
    """The image as a reader reads it, dark on light: each dark panel holding light ink (``_panels``, however
    tightly it fits its text) turned negative, then the solid dark areas left (a redaction's black box: dark
    throughout a square of _SOLID pixels) made white: the engine reads a black box as a word and doubts the words
    beside it. Strokes thinner than _SOLID (glyphs, rules, the ground between light letters) stay, and so does a
    solid area whose box holds light pixels (``_boxes``: a dark photograph behind a headline's white letters is no
    black box; whitened, it would leave the letters as outlines no one reads). The dark pixels (under 64) of each
    box the first pass ``painted`` are made white too, whatever touches them: two marks on neighbouring lines touch,
    and the light page between them (a highlight's tint) kept them from being judged solid boxes (the engine read
    them as doubted words); not a box holding light ink inside it (drawn on it after it, as ``_unpainted`` reads
    it), which would vanish on white."""
    pixels = numpy.asarray(gray).copy()
    for left, top, right, bottom in painted:
        box = pixels[max(0, top) : max(0, bottom), max(0, left) : max(0, right)]
        if not (box[2:-2, 2:-2] > 192).any():  # light ink drawn on it is read on its black, as _boxes leaves it
            box[box < 64] = 255
    for panel in _panels(pixels):
        pixels[panel] = 255 - pixels[panel]
        if min(side.stop - side.start for side in panel) >= _SOLID:  # (not a glyph's bold stroke in a scan)
            _edge_cleared(pixels, panel)
    turned = Image.fromarray(pixels)
    if min(turned.size) < _SOLID or numpy.asarray(turned.reduce(_SOLID // 2)).min() >= 64:
        return turned  # no square of _SOLID pixels holds a dark cell of half its side: nothing is solid
    pixels[_boxes(_solid_area(turned, _SOLID // 2), pixels)] = 255
    return Image.fromarray(pixels)


def _edge_cleared(pixels: numpy.ndarray, panel: tuple[slice, slice]) -> None:
    """Make white a panel's own edge outside its box (which ``_panels`` finds in whole cells): on each side, the
    lines of pixels beside it, outward, as long as each is darker than 224 along nineteen twentieths of the side
    (the panel's colour and its anti-aliased edge, not ink beside it), _GROUP at most. Left dark, it framed the
    text read negative, and the engine read the two as nothing it trusts."""
    rows, columns = panel
    top, bottom = rows.start, min(rows.stop, pixels.shape[0])
    left, right = columns.start, min(columns.stop, pixels.shape[1])
    sides = (
        [pixels[top - k - 1, left:right] for k in range(_GROUP) if top - k - 1 >= 0],
        [pixels[bottom + k, left:right] for k in range(_GROUP) if bottom + k < pixels.shape[0]],
        [pixels[top:bottom, left - k - 1] for k in range(_GROUP) if left - k - 1 >= 0],
        [pixels[top:bottom, right + k] for k in range(_GROUP) if right + k < pixels.shape[1]],
    )
    for lines in sides:
        for line in lines:  # views of ``pixels``: made white in place
            if (line < 224).mean() < 0.95:
                break
            line[line < 224] = 255


def _boxes(solid: numpy.ndarray, pixels: numpy.ndarray) -> numpy.ndarray:
    """The pixels of ``solid`` in its groups (cells of _GROUP pixels that touch) whose tight box holds no light
    pixel (over 192): a black box is dark throughout its box; a dark area around light ink is not."""
    rows, columns = -(-solid.shape[0] // _GROUP), -(-solid.shape[1] // _GROUP)
    padded = numpy.pad(solid, ((0, rows * _GROUP - solid.shape[0]), (0, columns * _GROUP - solid.shape[1])))
    boxes = numpy.zeros_like(solid)
    for top, left, bottom, right in _components(_per_cell(padded, numpy.maximum)):
        area = solid[top * _GROUP : (bottom + 1) * _GROUP, left * _GROUP : (right + 1) * _GROUP]
        inked_rows, inked_columns = numpy.flatnonzero(area.any(axis=1)), numpy.flatnonzero(area.any(axis=0))
        tight = (
            slice(top * _GROUP + inked_rows[0], top * _GROUP + inked_rows[-1] + 1),
            slice(left * _GROUP + inked_columns[0], left * _GROUP + inked_columns[-1] + 1),
        )
        if not (pixels[tight] > 192).any():
            boxes[tight] |= solid[tight]
    return boxes


def _panels(pixels: numpy.ndarray) -> Iterator[tuple[slice, slice]]:
    """The boxes (rows, columns) of the dark panels holding light ink, found by local contrast: groups of cells
    (_GROUP pixels) darker than mid-grey throughout, whose box is dark along most of its edge (light glyphs may
    come near it anywhere) and over at least _PANEL of its area, with cells of light pixels inside. A black box
    holds no light ink; a frame, a rule or a glyph of dark text is dark over little of its box; boxes that touch
    (marks on neighbouring lines) leave their union's edge open."""
    rows, columns = -(-pixels.shape[0] // _GROUP), -(-pixels.shape[1] // _GROUP)
    padded = numpy.pad(
        pixels, ((0, rows * _GROUP - pixels.shape[0]), (0, columns * _GROUP - pixels.shape[1])), constant_values=255
    )
    dark = _per_cell(padded, numpy.maximum) < 128
    if not dark.any():
        return
    light = _per_cell(padded, numpy.maximum) > 192
    for top, left, bottom, right in _components(dark):
        if bottom - top < 2 or right - left < 2:
            continue
        area = dark[top : bottom + 1, left : right + 1]
        edge = min(area[0].mean(), area[-1].mean(), area[:, 0].mean(), area[:, -1].mean())
        if edge >= 0.75 and area.mean() >= _PANEL and light[top : bottom + 1, left : right + 1].any():
            yield (slice(top * _GROUP, (bottom + 1) * _GROUP), slice(left * _GROUP, (right + 1) * _GROUP))


def _solid_area(gray: Image.Image, radius: int) -> numpy.ndarray:
    """The pixels of ``gray`` in a square of 2 * ``radius`` + 1 dark pixels (under 64): an erosion then a
    dilation, each one box mean (Pillow's box blur, linear in the pixels)."""
    dark = gray.point(lambda v: 255 if v < 64 else 0)
    inside = dark.filter(ImageFilter.BoxBlur(radius)).point(lambda v: 255 if v == 255 else 0)
    return numpy.asarray(inside.filter(ImageFilter.BoxBlur(radius))) > 0


def _grown(mask: numpy.ndarray, by: int) -> numpy.ndarray:
    """The mask grown by ``by`` cells in every direction."""
    tall = mask.copy()
    for shift in range(1, by + 1):
        tall[shift:, :] |= mask[:-shift, :]
        tall[:-shift, :] |= mask[shift:, :]
    grown = tall.copy()
    for shift in range(1, by + 1):
        grown[:, shift:] |= tall[:, :-shift]
        grown[:, :-shift] |= tall[:, shift:]
    return grown


def _ink_regions(gray: Image.Image) -> list[tuple[int, int, int, int]]:
    """Boxes (in the image's pixels) of the groups of ink in ``gray``: cells of _CELL pixels dark on average or
    crossed by a thin stroke (``_strokes``: small print), joined across _JOIN cells; a group that no glyph fits in
    (MIN_GLYPH on both sides) is left out."""
    width, height = gray.size
    cells = gray.reduce(_CELL) if min(gray.size) >= _CELL else gray
    ink = numpy.asarray(cells.point(lambda v: 255 if v < 128 else 0).convert("L")) > 0
    ink |= numpy.asarray(gray.resize(cells.size, Image.Resampling.BOX).point(lambda v: 255 if v < 200 else 0)) > 0
    ink |= _strokes(gray, ink.shape)
    regions = []
    for top, left, bottom, right in _components(_grown(ink, _JOIN)):  # a cell joins ink within _JOIN cells
        box = (left * _CELL, top * _CELL, min(width, (right + 1) * _CELL), min(height, (bottom + 1) * _CELL))
        if (
            box[2] - box[0] >= MIN_GLYPH
            and box[3] - box[1] >= MIN_GLYPH
            and ink[top : bottom + 1, left : right + 1].any()
        ):
            regions.append(box)
    return regions


def _strokes(gray: Image.Image, shape: tuple[int, int]) -> numpy.ndarray:
    """The cells (``shape`` of them, _CELL pixels on a side) crossed by a stroke: _STROKE or more dark pixels (under
    128). A thin glyph's stroke across a cell leaves its average light (small print read as no ink)."""
    pixels = numpy.asarray(gray)
    found = numpy.zeros(shape, dtype=bool)
    for top in range(0, pixels.shape[0], _ROWS):  # _ROWS rows at a time (a poster's mask is 70 MB)
        rows = pixels[top : top + _ROWS] < 128
        cells = -(-rows.shape[0] // _CELL)
        padded = numpy.pad(rows, ((0, cells * _CELL - rows.shape[0]), (0, shape[1] * _CELL - rows.shape[1])))
        counts = padded.reshape(cells, _CELL, shape[1], _CELL).sum(axis=(1, 3), dtype=numpy.uint8)
        found[top // _CELL : top // _CELL + cells] = counts >= _STROKE
    return found


def _components(grown: numpy.ndarray) -> Iterator[tuple[int, int, int, int]]:
    """(top, left, bottom, right) cells of each 4-connected group of set cells."""
    rows, columns = grown.shape
    seen = numpy.zeros_like(grown)
    for start in zip(*numpy.nonzero(grown)):
        if seen[start]:
            continue
        seen[start] = True
        stack, top, left, bottom, right = [start], start[0], start[1], start[0], start[1]
        while stack:
            r, c = stack.pop()
            top, bottom, left, right = min(top, r), max(bottom, r), min(left, c), max(right, c)
            for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
                if 0 <= nr < rows and 0 <= nc < columns and grown[nr, nc] and not seen[nr, nc]:
                    seen[nr, nc] = True
                    stack.append((nr, nc))
        yield int(top), int(left), int(bottom), int(right)


def _skews(region: Image.Image) -> list[float]:
    """The angles (degrees, counter-clockwise, -90 to 90) that may turn the region's lines level, the likeliest
    first: the turns whose rows of ink are most sharply separated (projection profile), each a peak of that
    sharpness over the angles (a line of a few glyphs has two: its line, and the columns its glyphs stand in)."""
    scale = _SKEW_SIDE / max(region.size)
    small = region.resize((max(1, round(region.width * scale)), max(1, round(region.height * scale))))
    ink = small.point(lambda v: 255 if v < 160 else 0)
    angles = range(-88, 92, 2)
    scores = [
        float(
            numpy.square(
                numpy.diff(numpy.asarray(ink.rotate(angle, expand=True, fillcolor=0), dtype=numpy.float64).sum(axis=1))
            ).sum()
        )
        for angle in angles
    ]
    peaks: list[float] = []
    for i in sorted(range(len(scores)), key=lambda i: -scores[i]):
        apart = all(min(abs(angles[i] - peak), 180 - abs(angles[i] - peak)) >= _APART for peak in peaks)
        if apart and scores[i] >= max(scores[i - 1], scores[(i + 1) % len(scores)]):
            peaks.append(float(angles[i]))
    return peaks[:_PEAKS]


def _legible(words: list[Word], shown: Image.Image, explained=(), known: int = 0, layer: Layer | None = None) -> bool:
    """A word that looks like text but is doubted may be a value misread: more than one in ten is not legible. A
    box of solid ink in ``shown`` (a redaction's black box, which the engine reads as a word) is no text, a
    doubted word where an ``explained`` word was read with confidence (text at an angle, read at it) is read, and
    so is one that is the page's trusted text ``layer`` (``Layer.explains``: small print in a ruled table)."""
    trusted = _trusted(explained)
    doubted = sum(_unread_doubt(word, shown, trusted, layer) for word in words)
    return doubted <= (len(words) + known) // 10


def _unread_doubt(word: Word, shown: Image.Image, trusted: list, layer: Layer | None) -> bool:
    """A doubted word (``_doubted``) that nothing reads: not a black box's (``_solid``), not covered by words read
    with confidence (``trusted``: ``_explained``), not the page's trusted text ``layer`` (``Layer.explains``)."""
    return (
        _doubted(word)
        and not _solid(word, shown)
        and not _explained(word, trusted)
        and not (layer is not None and layer.explains(word))
    )


def _trusted(words) -> list[tuple[int, int, int, int]]:
    """The boxes of the words read with confidence that look like text (two letters or digits, as ``_doubted``)."""
    return [word.box for word in words if word.confidence >= CONFIDENT and sum(c.isalnum() for c in word.text) >= 2]


def _explained(word: Word, trusted: list) -> bool:
    """Whether words read with confidence (``_trusted``) cover at least half of a doubted word's box: a stray
    mark read with confidence across or beside it (a '>', an 'S', a word of another reading) explains nothing."""
    left, top, right, bottom = word.box
    covered = numpy.zeros((max(1, bottom - top), max(1, right - left)), dtype=bool)
    for box in trusted:
        if _overlap(word.box, box):
            covered[max(0, box[1] - top) : box[3] - top, max(0, box[0] - left) : box[2] - left] = True
    return covered.mean() >= 0.5


def _doubted(word: Word) -> bool:
    """A word that looks like text (two letters or digits) but that the engine doubts."""
    return word.confidence < CONFIDENT and sum(c.isalnum() for c in word.text) >= 2


def _overlap(a, b) -> bool:
    return max(a[0], b[0]) < min(a[2], b[2]) and max(a[1], b[1]) < min(a[3], b[3])


def _solid(word: Word, shown: Image.Image) -> bool:
    """Whether the word is a black box's: its box at least half dark, with no light pixel among the dark (light
    ink on a dark ground is text to read, not a box)."""
    pixels = numpy.asarray(shown.crop(word.box))
    dark = pixels < 64
    if dark.mean() < 0.5:
        return False
    rows, columns = numpy.flatnonzero(dark.any(axis=1)), numpy.flatnonzero(dark.any(axis=0))
    return not (pixels[rows[0] : rows[-1] + 1, columns[0] : columns[-1] + 1] > 192).any()


def _words(gray: Image.Image, angle: float) -> list[Word]:
    """Words of the image turned by ``angle`` degrees counter-clockwise, boxes mapped back to the unturned image."""
    turned = gray.rotate(angle, expand=True, fillcolor=255) if angle else gray
    # pytesseract hands the engine a file in the image's format (PNG by default): PGM is the same pixels, read to
    # the same words, with no compression (PNG's took 12% of the CPU of redacting an A1 poster)
    turned.format = "PPM"
    data = pytesseract.image_to_data(
        turned, lang=_READING_IN.get(), config="--psm 3", output_type=pytesseract.Output.DICT
    )
    words, lines = [], {}
    for i, text in enumerate(data["text"]):
        text = text.strip()
        if not text or float(data["conf"][i]) < 0:
            continue
        left, top = data["left"][i], data["top"][i]
        box = (left, top, left + data["width"][i], top + data["height"][i])
        line = lines.setdefault((data["block_num"][i], data["par_num"][i], data["line_num"][i]), len(lines))
        words.append(Word(text, _unturn(box, angle, gray.size, turned.size), float(data["conf"][i]), line))
    return words


def _unturn(box, angle: float, size: tuple[int, int], turned: tuple[int, int]) -> tuple[int, int, int, int]:
    """A box found in an image of ``size`` turned ``angle`` degrees counter-clockwise about its centre (into an
    image of size ``turned``): the box around its corners in the unturned image's pixels."""
    if not angle:
        return box
    cos, sin = math.cos(math.radians(angle)), math.sin(math.radians(angle))
    xs, ys = [], []
    for x, y in ((box[0], box[1]), (box[2], box[1]), (box[0], box[3]), (box[2], box[3])):
        dx, dy = x - turned[0] / 2, y - turned[1] / 2
        xs.append(dx * cos - dy * sin + size[0] / 2)
        ys.append(dx * sin + dy * cos + size[1] / 2)
    return (
        max(0, math.floor(min(xs))),
        max(0, math.floor(min(ys))),
        min(size[0], math.ceil(max(xs))),
        min(size[1], math.ceil(max(ys))),
    )


def _score(words: list[Word]) -> float:
    return sum(word.confidence * len(word.text) for word in words if word.confidence >= CONFIDENT)
