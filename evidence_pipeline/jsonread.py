"""The one reader for JSON that comes from outside the process: archive files, envelopes, ledger bodies.

Bounded before it parses, in time linear in the input: a size cap, a nesting-depth check that is one forward scan
(``_scan``; the stdlib parser recurses and raises RecursionError on deep input), and refusal of duplicate object
keys (which the stdlib resolves silently, last one wins) and of the non-standard constants NaN and Infinity. Every
refusal is an EvidenceError with the caller's reason code, so each document keeps its own code (MANIFEST_INVALID,
...).
"""

from __future__ import annotations

import json
import re
from typing import Any

from evidence_pipeline.errors import EvidenceError

MAX_BYTES = 1 << 20  # every JSON document we read is a few KB: a manifest, an envelope, an event body
MAX_DEPTH = 16  # our documents nest at most 5 levels deep

# Each a single character class: a search moves forward from where the last one stopped and never backtracks, so
# a scan reads each character once. In a string only a quote or a backslash matters; outside, a quote or a bracket.
_IN_STRING = re.compile(r'["\\]')
_OUTSIDE = re.compile(r'["\[\]{}]')


class _Refused(ValueError):
    pass


def loads(data: bytes | str, code: str, what: str, max_bytes: int = MAX_BYTES) -> object:
    """Parse ``data`` (UTF-8 JSON describing ``what``) or raise EvidenceError(``code``) saying why not."""
    if len(data) > max_bytes:
        raise EvidenceError(code, f"{what} is larger than {max_bytes} bytes")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError:
        raise EvidenceError(code, f"{what} is not UTF-8") from None
    # The nesting depth is at most the number of opening brackets (those in strings included): most documents have
    # far fewer than MAX_DEPTH, and then need no scan (a ledger body has three).
    if text.count("{") + text.count("[") > MAX_DEPTH and _scan(text)[0] > MAX_DEPTH:
        raise EvidenceError(code, f"{what} nests deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constants)
    except _Refused as refused:
        raise EvidenceError(code, f"{what} {refused}") from None
    except ValueError:
        raise EvidenceError(code, f"{what} is not JSON") from None


def at(document: object, *path: str) -> Any:
    """The value at ``path`` through nested JSON objects, or None where a step is not an object or lacks the name:
    a read document is judged by comparing what is there with what is expected, whatever its shape."""
    for name in path:
        if not isinstance(document, dict):
            return None
        document = document.get(name)
    return document


def _scan(text: str, limit: int = MAX_DEPTH) -> tuple[int, int]:
    """(the deepest nesting outside strings, counted up to limit + 1; the steps taken): one pass forward, a state
    machine (in a string or not; in one, a backslash hides the character after it) that steps from one character
    that matters to the next, so it takes at most one step per character and never looks back."""
    depth = deepest = steps = position = 0
    in_string = False
    while deepest <= limit:
        found = (_IN_STRING if in_string else _OUTSIDE).search(text, position)
        if found is None:
            break
        steps += 1
        char, position = found.group(), found.end()
        if char == '"':
            in_string = not in_string
        elif char == "\\":
            position += 1
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1  # unbalanced: not JSON, json.loads says so
    return deepest, steps


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _Refused("has a duplicate object key")
    return result


def _no_constants(name: str) -> None:
    raise _Refused(f"uses the non-standard constant {name}")
