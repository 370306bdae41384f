"""`evidence verify … --report KIND DIR`: what a verification found, written in a format auditors' own tools read.

etsi   <DIR>/<tenant>/<YYYY-MM>/<identity>/<signature field>.xml   an ETSI TS 119 102-2 validation report per
                                                                   signature of the bundle's report (its newest
                                                                   renewal at B-LTA), at the --at moment
oscal  <DIR>/<tenant>/<YYYY-MM>/<identity>/assessment-results.json  the tenant-month's NIST OSCAL Assessment
                                                                   Results (oscal.py)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from evidence_pipeline import jsonread
from evidence_pipeline.audit.bundle_proof import TLOG_PROOF, witnessed
from evidence_pipeline.audit.oscal import Evidence, assessment_results
from evidence_pipeline.audit.verify import MAX_REPORT_BYTES, SIGNATURE_ALLOWANCE, Verification, trust_root
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.monthly.bundle import MANIFEST, newest_report
from evidence_pipeline.paths import make_dirs
from evidence_pipeline.signing.etsi_report import ValidationReport, validation_reports
from evidence_pipeline.store import ArtifactStore
from evidence_pipeline.witness.policy import TlogPolicy

ETSI, OSCAL = "etsi", "oscal"
KINDS = (ETSI, OSCAL)
ASSESSMENT_RESULTS = "assessment-results.json"


@dataclass(frozen=True)
class Request:
    """What the reports of one run are made with."""

    root_ids: frozenset[str]
    at: datetime | None
    policy: TlogPolicy | None  # the pinned witness policy: whose cosignature times count (else the store's own)
    controls: dict[str, Any]  # the OSCAL controls mapping


def bundle_etsi_reports(
    store: ArtifactStore, prefix: str, root_ids: frozenset[str], at: datetime | None
) -> list[ValidationReport]:
    """The reports of the bundle's PDF signatures, against the roots its manifest names (pinned by ``root_ids``)."""
    manifest: Any = jsonread.loads(
        store.get(f"{prefix}/{MANIFEST}", max_bytes=jsonread.MAX_BYTES), ReasonCode.MANIFEST_INVALID, MANIFEST
    )
    try:
        level, keys = manifest["pades_level"], manifest["keys"]
        root = trust_root(store, str(keys["trust_root_id"]), root_ids)
        tsa_root = trust_root(store, str(keys["tsa_root_id"]), root_ids) if level != "B-B" else None
    except (KeyError, TypeError):
        raise EvidenceError(ReasonCode.MANIFEST_INVALID, "the manifest names no PAdES level or roots") from None
    key, number = newest_report(store, prefix)
    pdf = store.get(key, max_bytes=MAX_REPORT_BYTES + (number + 1) * SIGNATURE_ALLOWANCE)
    return validation_reports(pdf, [root] + ([tsa_root] if tsa_root else []), level, at)


def write_reports(
    kind: str, directory: Path, *, store: ArtifactStore, prefix: str, verification: Verification, request: Request
) -> list[tuple[Path, str]]:
    """Write the bundle's reports of ``kind`` under ``directory``: (path, what it says) of each."""
    folder = directory / prefix.removeprefix("bundles/")  # tenant, period, identity: validated slugs and digests
    make_dirs(folder, 0o755)
    if kind == OSCAL:
        path = folder / ASSESSMENT_RESULTS
        path.write_bytes(
            assessment_document(
                store,
                prefix,
                verification=verification,
                policy=request.policy,
                controls=request.controls,
                at=request.at,
            )
        )
        return [(path, "assessment results")]
    written = []
    for report in bundle_etsi_reports(store, prefix, request.root_ids, request.at):
        path = folder / f"{report.field_name}.xml"
        path.write_bytes(report.xml)
        written.append((path, report.indication))
    return written


def assessment_document(
    store: ArtifactStore,
    prefix: str,
    *,
    verification: Verification,
    policy: TlogPolicy | None,
    controls: dict[str, Any],
    at: datetime | None = None,
) -> bytes:
    """The bundle's OSCAL Assessment Results from its ``verification`` (the witnessed time read only when its
    `tlog_proof` check passed)."""
    manifest: Any = jsonread.loads(
        store.get(f"{prefix}/{MANIFEST}", max_bytes=jsonread.MAX_BYTES), ReasonCode.MANIFEST_INVALID, MANIFEST
    )
    proved = any(check.name == TLOG_PROOF and check.passed for check in verification.checks)
    witnessed_at, leaf_index, size = witnessed(store, prefix, policy) if proved else (None, None, None)
    try:
        return assessment_results(verification, Evidence(manifest, witnessed_at, leaf_index, size), controls, at)
    except (KeyError, TypeError, ValueError):
        raise EvidenceError(ReasonCode.MANIFEST_INVALID, "the manifest lacks a field the assessment states") from None
