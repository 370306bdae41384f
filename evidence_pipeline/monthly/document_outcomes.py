"""A tenant-month's document outcomes, closed once: what intake's document jobs of the month came to.

At month close (the first pin of the tenant-month's evidence) the month's document jobs (every operation except
the evidence requests themselves) are written as one canonical JSON revision, named by its sha256, beside the
marketplace source revisions. It is never rewritten: every later pin reads the same revision, digest re-checked,
so a retried or backfilled month renders the same report. A job still open at close is listed in its state at
close; an outcome that arrives later belongs to a correction, not to this revision.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from evidence_pipeline import jsonread
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger.document_jobs import DocumentJobs
from evidence_pipeline.ledger.rows import DocumentJob
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.signing.dsse import canonical_json
from evidence_pipeline.store import ArtifactStore, sha256_hex

SCHEMA = "evidence-document-outcomes/v1"
_KEY = re.compile(r"^documents-000001-([0-9a-f]{64})\.json$")  # sequence 1: the close; corrections would follow


@dataclass(frozen=True)
class OutcomesRevision:
    """The pinned, immutable document outcomes of a tenant-month, named by the sha256 of their canonical bytes."""

    tenant_month: TenantMonth
    sha256: str
    key: str  # key in the source store


def close_month(
    store: ArtifactStore, document_jobs: DocumentJobs, tenant_month: TenantMonth
) -> tuple[OutcomesRevision, bool]:
    """The month's closed revision, and whether this call closed it (wrote it)."""
    closed = _closed(store, tenant_month)
    if closed is not None:
        return closed, False
    jobs = document_jobs.month_jobs(tenant_month.tenant, tenant_month.period)
    data = canonical_json(
        {
            "schema": SCHEMA,
            "tenant": tenant_month.tenant,
            "period": tenant_month.period,
            "jobs": [outcome(job) for job in jobs],
        }
    )
    store.put_once(f"{_prefix(tenant_month)}/documents-000001-{sha256_hex(data)}.json", data)
    # Two closes racing with different jobs both write; every pin takes the same one, the first by name.
    return _closed(store, tenant_month), True


def read_outcomes(store: ArtifactStore, revision: OutcomesRevision) -> list[dict]:
    """The jobs of a pinned revision, digest re-checked."""
    try:
        data = store.get(revision.key, expected_sha256=revision.sha256)
    except EvidenceError as error:
        if error.code == ReasonCode.STORE_DIGEST_MISMATCH:
            raise EvidenceError(
                ReasonCode.SOURCE_DIGEST_MISMATCH,
                f"document outcomes {revision.sha256[:12]} changed since the month closed",
            ) from None
        raise
    document = jsonread.loads(data, ReasonCode.SOURCE_INVALID, "the document outcomes")
    if not isinstance(document, dict) or document.get("schema") != SCHEMA or not isinstance(document["jobs"], list):
        raise EvidenceError(ReasonCode.SOURCE_INVALID, "the document outcomes are not " + SCHEMA)
    return document["jobs"]


def counts(jobs: list[dict]) -> list[tuple[str, str, int]]:
    """(operation, outcome, number of jobs), sorted: the outcome is the state, with a redaction's result
    (redacted, no_matches) or a review's decision (approved, rejected) and the reason code if any; the operation
    names the policy pinned at acceptance: a redaction's template version, a review's ruleset."""
    outcomes = Counter(
        (
            entry["operation"]
            + (f" @ {entry['template_version'][:12]}" if entry.get("template_version") else "")
            + (f" @ {entry['ruleset']}" if entry.get("ruleset") else ""),
            entry["state"]
            + "".join(f": {entry[result]}" for result in ("redaction", "decision") if entry.get(result))
            + (f" ({entry['reason']})" if entry["reason"] else ""),
        )
        for entry in jobs  # the entries of a closed revision (outcome), not ledger rows
    )
    return [(operation, outcome, n) for (operation, outcome), n in sorted(outcomes.items())]


def outcome(job: DocumentJob) -> dict:
    """What the closed revision records of one job (and `evidence demo` prints)."""
    outputs = job.outputs or {}
    summary = outputs.get("summary", {})
    outcome = {
        "job_id": job.job_id,
        "operation": job.operation,
        "inputs": job.request["inputs"],
        "state": job.state,
        "reason": job.last_reason,
        "outputs": [{"artifact_id": a["key"], "sha256": a["sha256"]} for a in outputs.get("artifacts", [])],
    }
    if template_version := job.request.get("template_version"):  # a redaction: its pinned version, its result
        outcome |= {"template_version": template_version} | (
            {"redaction": summary["outcome"]} if summary.get("outcome") else {}
        )
    if ruleset := job.request["options"].get("ruleset"):  # a review: its pinned ruleset, its decision
        outcome |= {"ruleset": ruleset} | ({"decision": summary["decision"]} if summary.get("decision") else {})
    return outcome


def _prefix(tenant_month: TenantMonth) -> str:
    return f"{tenant_month.tenant}/{tenant_month.period}"


def _closed(store: ArtifactStore, tenant_month: TenantMonth) -> OutcomesRevision | None:
    for key in store.list(_prefix(tenant_month)):
        match = _KEY.fullmatch(key.rsplit("/", 1)[-1])
        if match:
            return OutcomesRevision(tenant_month, match.group(1), key)
    return None
