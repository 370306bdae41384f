"""`evidence template shadow`: what a candidate template version would remove, beside the version in effect, on a
sample of the tenant's latest redaction inputs. Only the first pass's finding runs: nothing is written, published
or shown to reviewers, and the comparison holds counts per label, never the values."""

from __future__ import annotations

import contextlib
import io
from collections import Counter

import pikepdf
from sqlalchemy import select

from evidence_pipeline import jsonread
from evidence_pipeline.documents import ocr, templates
from evidence_pipeline.documents.gate import gate
from evidence_pipeline.documents.matching import Rules
from evidence_pipeline.documents.redact import Finding, find, readable
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.tempfiles import attempt_dir, scratch_file

MAX_SAMPLE = 200


def shadow(rt: Runtime, tenant: str, candidate: str, sample: int) -> dict:
    ledger = rt.ledger
    current = templates.in_effect(ledger, tenant)
    proposed = templates.version(ledger, tenant, candidate)
    rules = {
        name: (Rules.of(version["template"]), templates.languages(version["template"]))
        for name, version in (("current", current), ("candidate", proposed))
    }
    totals: dict[str, Counter] = {"both": Counter(), "only_current": Counter(), "only_candidate": Counter()}
    compared, refused = [], Counter()
    with attempt_dir(rt.settings.work_dir, "shadow", 0) as scratch:
        for document_id in _latest_inputs(rt, tenant, min(sample, MAX_SAMPLE)):
            row = rt.document_records.document(tenant, document_id)
            with scratch_file(scratch) as file:
                rt.document_store.get_file(row.store_key, file, expected_sha256=row.sha256)
                try:
                    gate(file, "flag")
                    found = {name: _values(file, r) for name, r in rules.items()}
                except EvidenceError as error:  # a refusal is counted, as the job would record it
                    refused[error.code] += 1
                    continue
            per_label = {"both": Counter(), "only_current": Counter(), "only_candidate": Counter()}
            for value in found["current"].keys() | found["candidate"].keys():
                side = (
                    "both"
                    if value in found["current"] and value in found["candidate"]
                    else "only_current"
                    if value in found["current"]
                    else "only_candidate"
                )
                per_label[side][found["current"].get(value) or found["candidate"][value]] += 1
            for side, counts in per_label.items():
                totals[side].update(counts)
            compared.append({"document_id": document_id, **{k: dict(sorted(v.items())) for k, v in per_label.items()}})
    return {
        "current": current["version_id"],
        "candidate": candidate,
        "documents": compared,
        "refused": dict(sorted(refused.items())),
        "totals": {side: dict(sorted(counts.items())) for side, counts in totals.items()},
    }


def _values(file, rules: tuple[Rules, tuple[str, ...]]) -> dict[str, str]:
    """The values the first pass finds under the rules, reading in the version's OCR languages."""
    file.seek(0)
    finding = Finding(source=file.read())
    with ocr.reading_in(rules[1]), readable(), pikepdf.open(io.BytesIO(finding.source)) as pdf:
        find(pdf, rules[0], finding)
    return finding.values


def _latest_inputs(rt: Runtime, tenant: str, sample: int) -> list[str]:
    """The inputs of the tenant's latest redaction jobs, newest first, each once."""
    jobs = rt.ledger.document_jobs.c
    query = (
        select(jobs.request)
        .where(jobs.tenant == tenant, jobs.operation == "redact")
        .order_by(jobs.accepted_at.desc())
        .limit(sample * 4)
    )
    with contextlib.closing(rt.ledger.engine.connect()) as conn:
        requests = conn.execute(query).scalars().all()
    seen: dict[str, None] = {}
    for request in requests:
        for document_id in jsonread.loads(request, ReasonCode.LEDGER_INVALID, "a job request")["inputs"]:
            seen.setdefault(document_id, None)
    return list(seen)[:sample]
