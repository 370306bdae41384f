"""Text inside images, read by Tesseract (Debian's `tesseract-ocr` with its English data, through pytesseract).

Both passes of a redaction read images with it, each decoding the pixels with its own library (pikepdf in the
first, pypdf in the second). ``read`` returns the words with their boxes in the image's own pixel coordinates, in
the orientation that reads best (an image scanned sideways or upside down is read turned), and whether the image
could be read with confidence: words that look like text but that the engine doubts outnumber the words it trusts.
An image too small to hold legible text is not read. Tesseract runs single-threaded (the worker's parallelism is
Dagster's), one process per image, and its temporary files are pytesseract's own (0600, deleted after each call).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import pytesseract
from PIL import Image

os.environ.setdefault("OMP_THREAD_LIMIT", "1")

MIN_SIDE = 16  # pixels: below this on either side an image cannot hold a legible line of text
CONFIDENT = 60  # Tesseract's word confidence (0-100) at and above which a word is trusted
_ROTATIONS = (0, 90, 180, 270)


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

    @property
    def lines(self) -> str:
        """The words as the engine read them: a line of the image per line of text, words joined by a space."""
        lines: dict[int, list[str]] = {}
        for word in self.words:
            lines.setdefault(word.line, []).append(word.text)
        return "\n".join(" ".join(words) for words in lines.values())


@functools.cache
def engine() -> str:
    """The engine and its version, for the derivative's report (a new engine may read an image differently)."""
    return f"tesseract {pytesseract.get_tesseract_version()}"


def read(image: Image.Image) -> Reading:
    if min(image.size) < MIN_SIDE:
        return Reading((), True)
    gray = image.convert("L")
    best = _words(gray, 0)
    if not _legible(best):  # perhaps scanned sideways or upside down: the turn that reads best
        for angle in _ROTATIONS[1:]:
            turned = _words(gray, angle)
            if _score(turned) > _score(best):
                best = turned
    return Reading(tuple(best), _legible(best))


def _legible(words: list[Word]) -> bool:
    """A word that looks like text but is doubted may be a value misread: more than one in ten is not legible."""
    doubted = sum(word.confidence < CONFIDENT and sum(c.isalnum() for c in word.text) >= 2 for word in words)
    return doubted <= len(words) // 10


def _words(gray: Image.Image, angle: int) -> list[Word]:
    """Words of the image turned by ``angle`` degrees counter-clockwise, boxes mapped back to the unturned image."""
    turned = gray.rotate(angle, expand=True) if angle else gray
    data = pytesseract.image_to_data(turned, config="--psm 3", output_type=pytesseract.Output.DICT)
    width, height = gray.size
    words, lines = [], {}
    for i, text in enumerate(data["text"]):
        text = text.strip()
        if not text or float(data["conf"][i]) < 0:
            continue
        left, top = data["left"][i], data["top"][i]
        right, bottom = left + data["width"][i], top + data["height"][i]
        line = lines.setdefault((data["block_num"][i], data["par_num"][i], data["line_num"][i]), len(lines))
        words.append(Word(text, _unturn((left, top, right, bottom), angle, width, height), float(data["conf"][i]),
                          line))
    return words


def _unturn(box, angle: int, width: int, height: int) -> tuple[int, int, int, int]:
    """A box found in the image turned ``angle`` degrees counter-clockwise, in the unturned image's pixels."""
    left, top, right, bottom = box
    if angle == 90:  # turned (x, y) came from (width - 1 - y, x)
        return width - bottom, left, width - top, right
    if angle == 180:
        return width - right, height - bottom, width - left, height - top
    if angle == 270:
        return top, height - right, bottom, height - left
    return box


def _score(words: list[Word]) -> float:
    return sum(word.confidence * len(word.text) for word in words if word.confidence >= CONFIDENT)

