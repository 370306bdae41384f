"""The one reader for JSON that comes from outside the process: archive files, envelopes, ledger bodies.

Bounded before it parses: a size cap, a nesting-depth check that is itself a flat loop (the stdlib parser
recurses and raises RecursionError on deep input), and refusal of duplicate object keys (which the stdlib
resolves silently, last one wins) and of the non-standard constants NaN and Infinity. Every refusal is an
EvidenceError with the caller's reason code, so each document keeps its own code (MANIFEST_INVALID, ...).
"""

from __future__ import annotations

import json
import re

from evidence_pipeline.errors import EvidenceError

MAX_BYTES = 1 << 20  # every JSON document we read is a few KB: a manifest, an envelope, an event body
MAX_DEPTH = 16  # our documents nest at most 5 levels deep

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


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
    if text.count("{") + text.count("[") > MAX_DEPTH and _depth(text) > MAX_DEPTH:
        raise EvidenceError(code, f"{what} nests deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constants)
    except _Refused as refused:
        raise EvidenceError(code, f"{what} {refused}") from None
    except ValueError:
        raise EvidenceError(code, f"{what} is not JSON") from None


def _depth(text: str) -> int:
    """The deepest bracket nesting outside strings, counted in a loop (never recursion)."""
    depth = deepest = 0
    for bracket in _BRACKET.findall(_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _Refused("has a duplicate object key")
    return result


def _no_constants(name: str) -> None:
    raise _Refused(f"uses the non-standard constant {name}")
