"""What document jobs write and their walk back to the upload reads: the names and statement types of a job's
outputs and derivatives, and what a pinned reviewer's decision must say.

Here, beside errors and models, and not in documents/ (whose package opens the ledger's tables): the offline walk
of an audit package (audit/lineage.py) reads them and must load no database driver.
"""

from __future__ import annotations

from evidence_pipeline.actors.requests import recorded
from evidence_pipeline.actors.roles import Action
from evidence_pipeline.errors import EvidenceError

STATEMENT = "statement.dsse.json"
PREDICATE_TYPE = "https://evidence-pipeline.dev/document-job/v1"
SIGNATURE_CHECK_PREDICATE_TYPE = "https://evidence-pipeline.dev/signature-check/v1"
SIGNATURE_CHECKS = "signature-checks"  # documents/<tenant>/signature-checks/<check>: records, statements, reports
DERIVATIVE_PREDICATE_TYPE = "https://evidence-pipeline.dev/derivative/v1"
DERIVATIVE_MANIFEST_SCHEMA = "evidence-derivative/v1"
DERIVED_BY_FIELD = "EvidenceDerivedBy"  # the signature field of the service's signature on a derivative's copy
DERIVED_BY = "derived-by.pdf"  # a derivative's copy signed by the service: <name>.derived-by.pdf
DECISION = "decision.json"  # a contract review's decision
_DECISION_ARGS = frozenset({"artifact_id", "decision", "reason"})


def decision_problem(event: dict, pin: dict, sha256: str) -> str | None:
    """What is wrong with a `part.decided` event (its body) as the pinned approval of the part of digest
    ``sha256``: None when nothing is. The signed request must say what the event says."""
    details = event["details"]
    if (
        details.get("artifact_id") != pin["artifact_id"]
        or details.get("sha256") != sha256
        or event["subject_sha256"] != sha256
    ):
        return "it is about other bytes"
    if event["actor"] != pin["decided_by"]:
        return "another actor decided"
    if details.get("decision") != "approved":
        return "it is not an approval"
    try:
        request = recorded(details.get("authorization"))
    except EvidenceError:
        return "it carries no signed request"
    signed = {name: details.get(name) for name in _DECISION_ARGS}
    if (request.action, request.actor, request.tenant, request.args) != (
        Action.PART_DECIDE,
        event["actor"],
        event["tenant"],
        signed,
    ):
        return "its signed request says otherwise"
    return None
