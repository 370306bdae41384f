"""`evidence ruleset shadow`: how a candidate ruleset would have decided recent contract reviews.

Each sampled job's upload is read back (digest re-checked), gated and reviewed under the candidate, and the
outcome compared with the decision the job committed. A shadow run only reads: it never signs, never writes the
archive, and appends nothing to the ledger, so nothing a tenant sees changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from evidence_pipeline.documents.gate import gate
from evidence_pipeline.documents.registry import outcome_codes
from evidence_pipeline.documents.review import CONTRACT_REVIEW, evaluate
from evidence_pipeline.documents.ruleset import Ruleset
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.tempfiles import scratch_file


@dataclass(frozen=True)
class Difference:
    job_id: str
    tenant: str
    current: dict  # the committed decision: decision, ruleset, missing, failed_rules
    candidate: dict  # the candidate's: decision (or the code that stopped the review), missing, failed_rules

    @property
    def changed(self) -> bool:
        return any(self.current.get(key) != self.candidate.get(key) for key in ("decision", "missing", "failed_rules"))


def shadow(rt: Runtime, candidate: Ruleset, sample: int) -> list[Difference]:
    """The candidate's decision beside the committed one, for the ``sample`` most recent reviews."""
    work_dir = rt.settings.work_dir
    results = []
    for job in rt.document_jobs.recent_decisions(CONTRACT_REVIEW.name, sample):
        summary = job.outputs["summary"]
        current = {key: summary[key] for key in ("decision", "ruleset", "missing", "failed_rules")}
        row = rt.document_records.document(job.tenant, job.request["inputs"][0])
        with scratch_file(work_dir) as file:
            try:
                rt.document_store.get_file(row.store_key, file, expected_sha256=row.sha256)
            except EvidenceError as error:
                if error.code != ReasonCode.STORE_NOT_FOUND:
                    raise
                continue  # erased (its tenant was offboarded): nothing to re-read
            try:
                gate(file)
                _, decision = evaluate(file, candidate)
                failed = [r["id"] for r in decision["rules"] if r["outcome"] == "fail"]
                outcome = {"decision": decision["decision"], "missing": decision["missing"], "failed_rules": failed}
            except EvidenceError as error:  # the gate's refusals and REVIEW_INPUT_INVALID are outcomes too
                if error.code not in outcome_codes():
                    raise
                outcome = {"decision": error.code, "missing": [], "failed_rules": []}
        results.append(Difference(job.job_id, job.tenant, current, outcome | {"ruleset": candidate.version}))
    return results
