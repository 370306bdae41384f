"""Redaction templates approved and redaction jobs run, as the redaction tests and the tests of what they publish
need."""

from __future__ import annotations

import io
import subprocess
from datetime import datetime

from evidence_pipeline.documents import redact, templates
from evidence_pipeline.documents.gate import gate
from evidence_pipeline.documents.registry import ProcessorInput
from evidence_pipeline.synthetic.rental_applications import organization_template, program_template
from evidence_pipeline_tests.support.intake_server import submit
from evidence_pipeline_tests.support.signers import signers_of

FLAG = {"active_content": "flag"}  # the applications carry an attachment, which the gate refuses by default


def approved(
    documents, organization: bytes | None = None, program: bytes | None = None, effective_at: datetime | None = None
) -> str:
    signers = actors(documents)
    version, _ = signers.submit_template(
        "acme", organization or organization_template(), program or program_template(), "alice", effective_at
    )
    signers.approve_template("acme", version["version_id"], "bob")
    return version["version_id"]


def actors(documents):
    """The test actors, and `alice`, an operator who also approves (so that she may try to approve her own)."""
    signers = signers_of(documents.ledger)
    signers.ensure("alice", ["operator", "approver"])
    return signers


def redact_job(http, key: str, document_id: str, operation: str = "redact"):
    return submit(http, key, {"operation": operation, "inputs": [document_id], "options": FLAG})


def pdftotext(data: bytes) -> str:
    return subprocess.run(["pdftotext", "-", "-"], input=data, capture_output=True, check=True).stdout.decode()


def pinned_template(program: bytes | None = None, organization: bytes | None = None) -> dict:
    """What a job pins: the merged template (the demo's organization and program by default) and its version."""
    merged = templates.merge(
        templates.parse(organization or organization_template(), "organization"),
        templates.parse(program or program_template(scanned_page=None), "program"),
    )
    return {"template": merged, "template_version": templates.version_id(merged)}


def redact_pure(data: bytes, program: bytes | None = None, organization: bytes | None = None, remove: bool = True):
    file = io.BytesIO(data)
    document = ProcessorInput("doc_pure", "0" * 64, len(data), gate(file, "flag"), file)
    return redact.run([document], pinned_template(program, organization), remove)
