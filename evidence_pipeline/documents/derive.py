"""`split` and `merge`: new documents made from pages of others, with pypdf. The inputs are never modified.

A split (``options.parts: [{"name", "pages": "1-4"}, …]``) writes one derivative per part; a merge writes one
derivative of its inputs' pages, in the order given. Changing the container breaks every signature over it, so a
derivative carries none of its parent's: signature fields and their widgets, the AcroForm, /Perms and the DSS are
left behind (the worker's signature check stage has recorded what the parent's signatures were), and each
derivative is checked to hold no signature object before it is returned. pypdf writes the same bytes for the same
pages, so a derivative is deterministic: the same inputs and options give the same output digest.

The worker publishes each derivative content-addressed with its lineage (documents/worker.py). A merge admits
parts approved by a contract review or by a reviewer's decision (documents/decisions.py).
"""

from __future__ import annotations

import io
import re

from pypdf import PdfReader, PdfWriter, apply_configuration
from pypdf.generic import ArrayObject, DictionaryObject, NameObject

from evidence_pipeline.documents.decisions import approved_inputs
from evidence_pipeline.documents.gate import LIMITS, gate
from evidence_pipeline.documents.registry import (
    ACTIVE_CONTENT_OPTION,
    Derivative,
    Operation,
    ProcessorInput,
    ProcessorResult,
    Structured,
    register,
)
from evidence_pipeline.errors import EvidenceError, ReasonCode

MAX_PARTS = 50
PART_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")  # a part's name becomes part of an object key
_RANGE = re.compile(r"^([1-9][0-9]{0,4})(?:-([1-9][0-9]{0,4}))?$")
MERGED = "merged"


def parse_pages(pages) -> list[int]:
    """``"1-4"``, ``"7"`` or ``"1-2,5"`` -> the 1-based page numbers, in order; OPTIONS_INVALID otherwise."""
    if not isinstance(pages, str) or not pages:
        raise EvidenceError(ReasonCode.OPTIONS_INVALID, 'a part\'s pages are a range like "1-4", "7" or "1-2,5"')
    numbers: list[int] = []
    for piece in pages.split(","):
        match = _RANGE.fullmatch(piece.strip())
        if not match or (match[2] and int(match[2]) < int(match[1])):
            raise EvidenceError(ReasonCode.OPTIONS_INVALID, f"bad page range {piece.strip()[:20]!r}")
        numbers += range(int(match[1]), int(match[2] or match[1]) + 1)
    if len(set(numbers)) != len(numbers):
        raise EvidenceError(ReasonCode.OPTIONS_INVALID, "a part names a page twice")
    return numbers


def parse_parts(parts) -> list[dict[str, str]]:
    """The ``parts`` option, normalized: names unique slugs, page ranges well-formed and not overlapping."""
    if not isinstance(parts, list) or not 1 <= len(parts) <= MAX_PARTS:
        raise EvidenceError(ReasonCode.OPTIONS_INVALID, f"parts is a list of 1..{MAX_PARTS} parts")
    normalized, names, taken = [], set(), set()
    for part in parts:
        if not isinstance(part, dict) or set(part) != {"name", "pages"}:
            raise EvidenceError(ReasonCode.OPTIONS_INVALID, 'each part is {"name": …, "pages": "1-4"}')
        name = part["name"]
        if not isinstance(name, str) or not PART_NAME.fullmatch(name) or name == MERGED:
            raise EvidenceError(ReasonCode.OPTIONS_INVALID, "a part's name must match ^[a-z0-9][a-z0-9-]{0,62}$")
        if name in names:
            raise EvidenceError(ReasonCode.OPTIONS_INVALID, f"two parts are named {name}")
        numbers = parse_pages(part["pages"])
        if taken & set(numbers):
            raise EvidenceError(ReasonCode.OPTIONS_INVALID, f"part {name} overlaps an earlier part")
        names.add(name)
        taken.update(numbers)
        normalized.append({"name": name, "pages": ",".join(_ranges(numbers))})
    return normalized


def _ranges(numbers: list[int]) -> list[str]:
    """[1, 2, 3, 7] -> ["1-3", "7"]: the canonical spelling of a part's pages."""
    ranges: list[list[int]] = []
    for n in numbers:
        if ranges and n == ranges[-1][1] + 1:
            ranges[-1][1] = n
        else:
            ranges.append([n, n])
    return [f"{a}" if a == b else f"{a}-{b}" for a, b in ranges]


def split_document(inputs: list[ProcessorInput], options: dict, pinned: dict) -> ProcessorResult:
    (document,) = inputs
    reader = _reader(document)
    derived = []
    for part in options["parts"]:
        numbers = parse_pages(part["pages"])
        if max(numbers) > len(reader.pages):
            raise EvidenceError(
                ReasonCode.OPTIONS_INVALID, f"part {part['name']} names a page beyond the last ({len(reader.pages)})"
            )
        data = _write([reader.pages[n - 1] for n in numbers])
        derived.append(Derivative(part["name"], data, (document.document_id,), {"pages": part["pages"]}))
    summary = {"parts": [{"name": d.name, "pages": d.facts["pages"]} for d in derived], "pages": len(reader.pages)}
    return ProcessorResult({}, summary, derived=tuple(derived))


def merge_documents(inputs: list[ProcessorInput], options: dict, pinned: dict) -> ProcessorResult:
    pages = [page for document in inputs for page in _reader(document).pages]
    data = _write(pages)
    parents = tuple(document.document_id for document in inputs)
    derivative = Derivative(MERGED, data, parents, {"pages": len(pages)})
    return ProcessorResult({}, {"inputs": len(inputs), "pages": len(pages)}, derived=(derivative,))


def _reader(document: ProcessorInput) -> PdfReader:
    document.file.seek(0)
    with apply_configuration(**LIMITS):
        reader = PdfReader(document.file, strict=True)
        for page in reader.pages:  # before any page is copied: what is dropped is never cloned
            _detach(page)
    return reader


def _detach(page: DictionaryObject) -> None:
    """Cut what would make copying the page copy more than the page: signature widgets (the parent's signatures),
    links into other pages, article beads. (pypdf never copies a /Parent, so other widgets come without their
    field, whose other widgets may sit on other pages; the AcroForm stays behind.)"""
    page.pop("/B", None)
    annotations = page.get("/Annots")
    if annotations is None:
        return
    kept = ArrayObject()
    for reference in annotations.get_object():
        annotation = reference.get_object()
        if not (_is_signature(annotation) or _links_inside(annotation)):
            kept.append(reference)
    if kept:
        page[NameObject("/Annots")] = kept
    else:
        del page["/Annots"]


def _is_signature(annotation) -> bool:
    parent = annotation.get("/Parent")
    return annotation.get("/FT") == "/Sig" or (parent is not None and parent.get_object().get("/FT") == "/Sig")


def _links_inside(annotation) -> bool:
    action = annotation.get("/A")
    return annotation.get("/Subtype") == "/Link" and (
        "/Dest" in annotation or (action is not None and action.get_object().get("/S") == "/GoTo")
    )


def _write(pages) -> bytes:
    with apply_configuration(**LIMITS):
        writer = PdfWriter()
        for page in pages:
            writer.add_page(page)  # the page alone: no AcroForm, /Perms, DSS or outline of the parent
        out = io.BytesIO()
        writer.write(out)
    data = out.getvalue()
    if gate(io.BytesIO(data), "flag").signatures_present:  # a defect here must never publish a parent's signature
        raise EvidenceError(ReasonCode.UNEXPECTED_ERROR, "a derivative still holds a signature object")
    return data


SPLIT = register(
    Operation(
        name="split",
        processor=split_document,
        options={
            "parts": Structured(parse_parts, '[{"name": …, "pages": "1-4"}, …]'),
            **ACTIVE_CONTENT_OPTION,
        },
        inputs=(1, 1),
        staged=True,
        processing_stage="splitting",
        signature_check=True,
        outcomes=frozenset({ReasonCode.OPTIONS_INVALID}),
    )
)
MERGE = register(
    Operation(
        name="merge",
        processor=merge_documents,
        options=ACTIVE_CONTENT_OPTION,
        inputs=(2, 100),
        staged=True,
        processing_stage="merging",
        admit_inputs=approved_inputs,
    )
)
