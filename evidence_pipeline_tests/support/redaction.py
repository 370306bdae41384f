"""Redaction templates approved and redaction jobs run, as the redaction tests and the tests of what they publish
need."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tempfile
from datetime import datetime
from pathlib import Path

from PIL import Image

from evidence_pipeline.documents import ocr, redact, templates
from evidence_pipeline.documents.gate import gate
from evidence_pipeline.documents.matching import decodings, flat, normalize
from evidence_pipeline.documents.redaction_check import _pypdf_text
from evidence_pipeline.documents.registry import ProcessorInput
from evidence_pipeline.monthly.validate import pdfium_text
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


def leaks(data: bytes, value: str) -> list[str]:
    """The readers that find ``value`` in ``data``: pdftotext, pypdf, pdfium, pdfimages + OCR of each image, and
    qpdf's decoded object dump (its strings read in every spelling)."""
    wanted = flat(value)

    def has(text: str) -> bool:
        return wanted in flat(text) or wanted in flat(normalize(text))

    found = [
        name
        for name, pages in (("pypdf", _pypdf_text(data)), ("pdfium", pdfium_text(data)))
        if any(has(page) for page in pages)
    ]
    if shutil.which("pdftotext") and has(pdftotext(data)):
        found.append("pdftotext")
    if shutil.which("qpdf") and any(has(text) for blob in _qpdf_strings(data) for text in decodings(blob)):
        found.append("qpdf")
    if shutil.which("pdfimages"):
        with tempfile.TemporaryDirectory() as scratch:
            subprocess.run(["pdfimages", "-png", "-", f"{scratch}/image"], input=data, check=True)
            if any(has(ocr.read(Image.open(path)).lines) for path in sorted(Path(scratch).iterdir())):
                found.append("pdfimages+ocr")
    return found


def _qpdf_strings(data: bytes) -> list[bytes]:
    """qpdf's decoded dump (--qdf: streams decoded, one revision) and every string and name of its JSON view, as
    bytes: a text string as qpdf decodes it (UTF-16 or PDFDocEncoding), a binary one as its bytes."""
    with tempfile.NamedTemporaryFile(suffix=".pdf") as file:
        file.write(data)
        file.flush()
        dump = subprocess.run(
            ["qpdf", "--qdf", "--object-streams=disable", "--decode-level=all", file.name, "-"], capture_output=True
        ).stdout
        view = json.loads(
            subprocess.run(
                ["qpdf", "--json=2", "--decode-level=all", "--json-stream-data=none", file.name], capture_output=True
            ).stdout
        )
    found, stack = [dump], [view["qpdf"][1]]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and item.startswith("u:"):
            found.append(item[2:].encode())
        elif isinstance(item, str) and item.startswith("b:"):
            found.append(bytes.fromhex(item[2:]))
        elif isinstance(item, str):
            found.append(item.encode())
    return found
