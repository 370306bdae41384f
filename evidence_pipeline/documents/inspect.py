"""`inspect`: what a document is, as the gate found it: pages, PDF version, producer, signatures, fonts, active
content, and the input's digest. Deterministic, so a retried job writes identical bytes."""

from __future__ import annotations

from evidence_pipeline.documents.registry import (
    ACTIVE_CONTENT_OPTION,
    Operation,
    ProcessorInput,
    ProcessorResult,
    register,
)
from evidence_pipeline.signing.dsse import canonical_json

INSPECTION = "inspection.json"


def inspect_document(inputs: list[ProcessorInput], options: dict[str, str], pinned: dict) -> ProcessorResult:
    (document,) = inputs
    gated = document.gated
    inspection = {
        "input": {"document_id": document.document_id, "sha256": document.sha256, "bytes": document.size},
        "pages": gated.pages,
        "pdf_version": gated.pdf_version,
        "producer": gated.producer,
        "signatures_present": gated.signatures_present,
        "fonts": list(gated.fonts),
        "active_content": list(gated.active_content),
        "permissions_only_encryption": gated.permissions_only,
        "options": options,
    }
    summary = {"pages": gated.pages, "active_content": list(gated.active_content)}
    return ProcessorResult({INSPECTION: canonical_json(inspection) + b"\n"}, summary)


INSPECT = register(
    Operation(
        name="inspect",
        processor=inspect_document,
        options=ACTIVE_CONTENT_OPTION,
        writes=False,
    )
)
