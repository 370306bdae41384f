"""Admission: the cheap, durable checks and writes behind intake's endpoints. No PDF is parsed here."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import BinaryIO

from evidence_pipeline.documents import Documents, document_key
from evidence_pipeline.documents.registry import operation
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.ledger.documents import JobLimits, sha256_text
from evidence_pipeline.ledger.ledger import canonical

PDF = "application/pdf"
ALLOWED_MEDIA_TYPES = {PDF: b"%PDF-"}  # declared type -> the magic its bytes must begin with
SNIFF_BYTES = 8
_IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
MAX_INPUTS = 100


def sniff(head: bytes) -> str | None:
    """The allowed media type the first bytes prove, or None."""
    return next((media for media, magic in ALLOWED_MEDIA_TYPES.items() if head.startswith(magic)), None)


def declared_media_type(content_type: str | None) -> str:
    """The media type of a Content-Type header (parameters dropped), refused unless allowed."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media not in ALLOWED_MEDIA_TYPES:
        raise EvidenceError("MEDIA_TYPE_UNSUPPORTED", "Content-Type must be one of " + ", ".join(ALLOWED_MEDIA_TYPES))
    return media


def expected_digest(header: str | None) -> str | None:
    if header is None:
        return None
    if not _SHA256.fullmatch(header.strip().lower()):
        raise EvidenceError("REQUEST_INVALID", "X-Content-SHA256 must be 64 hexadecimal digits")
    return header.strip().lower()


def store_document(documents: Documents, tenant: str, file: BinaryIO, sha256: str, size: int, media_type: str,
                   actor: str) -> tuple[dict, bool]:
    """Put the received bytes once, content-addressed, then commit `document.admitted`. Returns (row, created)."""
    key = document_key(tenant, sha256)
    stored = documents.store.put_file(key, file)
    if (stored.sha256, stored.size) != (sha256, size):
        raise EvidenceError("STORE_DIGEST_MISMATCH", "the stored document differs from the received bytes")
    return documents.ledger.admit_document(tenant, sha256, size, media_type, key, actor)


def document_view(row: dict) -> dict:
    return {"document_id": row["document_id"], "sha256": row["sha256"], "bytes": row["size"],
            "media_type": row["media_type"]}


def check_idempotency_key(key: str | None) -> str:
    if key is None or not _IDEMPOTENCY_KEY.fullmatch(key):
        raise EvidenceError("IDEMPOTENCY_KEY_INVALID", "Idempotency-Key must be 1-255 visible ASCII characters")
    return key


def submit_job(documents: Documents, tenant: str, idempotency_key: str, body, actor: str) -> tuple[dict, bool]:
    """Validate a job request and accept it once per idempotency key. Returns (job, created)."""
    if not isinstance(body, dict):
        raise EvidenceError("REQUEST_INVALID", "the body must be a JSON object")
    unknown = sorted(set(body) - {"operation", "inputs", "options"})
    if unknown:
        raise EvidenceError("REQUEST_INVALID", f"unknown field {unknown[0][:64]!r}")
    op = operation(body.get("operation"))
    options = op.normalize(body.get("options", {}))
    inputs = body.get("inputs")
    least, most = op.inputs
    if not (isinstance(inputs, list) and all(isinstance(i, str) for i in inputs) and least <= len(inputs) <= most
            and len(inputs) <= MAX_INPUTS):
        raise EvidenceError("INPUTS_INVALID", f"{op.name} takes {least}..{most} document ids in `inputs`")
    for document_id in inputs:
        if documents.ledger.document(tenant, document_id) is None:
            raise EvidenceError("DOCUMENT_NOT_FOUND", "no such document")
    settings = documents.runtime.settings
    policy = settings.policy_version
    request_sha256 = sha256_text(canonical({
        "tenant": tenant, "operation": op.name, "inputs": inputs, "options": options, "policy_version": policy,
    }))
    limits = JobLimits(settings.tenant_max_jobs, settings.intake_max_queue_age_seconds)
    return documents.ledger.submit_job(tenant, idempotency_key, request_sha256, op.name,
                                       {"inputs": inputs, "options": options}, policy, actor, limits)


def check_byte_quota(documents: Documents, tenant: str, declared: int) -> None:
    """Refuse an upload that would take the tenant past its stored-bytes quota, before reading it."""
    quota = documents.runtime.settings.tenant_max_bytes
    if documents.ledger.stored_bytes(tenant) + declared > quota:
        raise EvidenceError("TENANT_QUOTA_EXCEEDED", f"at most {quota} stored document bytes")


def job_view(job: dict) -> dict:
    """A job as its tenant sees it."""

    def when(stamp: float | None) -> str | None:
        return None if stamp is None else datetime.fromtimestamp(stamp, timezone.utc).isoformat(timespec="milliseconds")

    outputs = job["outputs"] or {}
    return {
        "job_id": job["job_id"], "operation": job["operation"], "state": job["state"],
        "reason": job["last_reason"] if job["state"] in ("rejected", "dead") else None,
        "attempts": job["attempts"], "inputs": job["request"]["inputs"], "options": job["request"]["options"],
        "accepted_at": when(job["accepted_at"]), "started_at": when(job["started_at"]),
        "finished_at": when(job["finished_at"]),
        "outputs": [{"artifact_id": a["key"], "sha256": a["sha256"], "bytes": a["bytes"]}
                    for a in outputs.get("artifacts", [])],
        "findings": outputs.get("summary"),
        "status_url": f"/v1/jobs/{job['job_id']}",
    }
