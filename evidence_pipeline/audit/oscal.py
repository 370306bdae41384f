"""A tenant-month's evidence as NIST OSCAL Assessment Results (JSON), which compliance platforms import.

One document per verified bundle: one result whose window is the month (the observation period), one
observation (the bundle, its digests, its ledger position, the time it was witnessed, each check's outcome) and
one finding per control of the mapping, satisfied when every check the mapping lists for that control, of those
the verification ran, passed. The time it was witnessed is the earliest valid cosignature timestamp of a policy
witness on the checkpoint note the bundle's tlog proof reaches (signed by the witness: not an editable date); a
bundle without one (read from an archive) falls back to its ledger publication time, and says so. Freshness: the
evidence's age at the assessment time (``--at``, else that same witnessed or published time) against each
control's ``max_age_days``: ``fresh`` or ``stale``. Every UUID is derived from the content (uuid5) and no clock is
read, so the same bundle, mapping and assessment time give the same bytes.

The mapping is a JSON file the operator owns (``--controls FILE``, or ``EVIDENCE_OSCAL_CONTROLS`` for `evidence
export`); DEFAULT_CONTROLS is the documented default.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, cast

from evidence_pipeline import jsonread
from evidence_pipeline.audit.verify import Verification
from evidence_pipeline.errors import EvidenceError, ReasonCode

OSCAL_VERSION = "1.1.2"
NS = "https://evidence-pipeline.dev/ns/oscal"
_NAMESPACE = uuid.UUID("6f1c1d2e-51a0-5e8b-9c51-0e51de7a51c0")  # of this project's OSCAL UUIDs
_INTEGRITY = [
    "bundle_complete",
    "statement_signature",
    "subject_digest",
    "unsigned_report_digest",
    "identity",
    "manifest_matches_statement",
]
DEFAULT_CONTROLS = {
    "catalog": "https://raw.githubusercontent.com/usnistgov/oscal-content/main/nist.gov/SP800-53/rev5/json/"
    "NIST_SP-800-53_rev5_catalog.json",
    "controls": [
        {
            "control_id": "au-9",
            "title": "Protection of Audit Information",
            "max_age_days": 45,
            "checks": [*_INTEGRITY, "inclusion_proof", "ledger_event", "tlog_proof"],
        },
        {
            "control_id": "au-10",
            "title": "Non-repudiation",
            "max_age_days": 45,
            "checks": ["statement_signature", "statement_key", "pdf_signature", "signing_keys"],
        },
        {
            "control_id": "au-11",
            "title": "Audit Record Retention",
            "max_age_days": 400,
            "checks": ["bundle_complete", "inclusion_proof", "tlog_proof", "corrections_chain"],
        },
        {
            "control_id": "si-7",
            "title": "Software, Firmware, and Information Integrity",
            "max_age_days": 45,
            "checks": [*_INTEGRITY, "pdf_signature"],
        },
    ],
}


@dataclass(frozen=True)
class Evidence:
    """What the document states of one bundle, besides its verification."""

    manifest: dict[str, Any]
    witnessed_at: datetime | None  # the witness's time, None when the bundle carries no co-signed proof
    leaf_index: int | None
    checkpoint_size: int | None


def load_controls(path: Path | None) -> dict[str, Any]:
    """The operator's mapping (CONFIG_INVALID when it is not of the format), or the default."""
    if path is None:
        return DEFAULT_CONTROLS
    try:
        data = path.read_bytes()
    except OSError:
        raise EvidenceError(ReasonCode.CONFIG_INVALID, f"the controls mapping {path.name} cannot be read") from None
    mapping: Any = jsonread.loads(data, ReasonCode.CONFIG_INVALID, path.name)
    try:
        valid = (
            isinstance(mapping["catalog"], str)
            and mapping["controls"]
            and all(
                isinstance(c["control_id"], str)
                and isinstance(c["title"], str)
                and type(c["max_age_days"]) is int
                and c["max_age_days"] > 0
                and c["checks"]
                and all(isinstance(name, str) for name in c["checks"])
                for c in mapping["controls"]
            )
        )
    except (KeyError, TypeError):
        valid = False
    if not valid:
        raise EvidenceError(
            ReasonCode.CONFIG_INVALID,
            f"{path.name} is not a controls mapping: {{\"catalog\": URL, "
            "\"controls\": [{\"control_id\", \"title\", \"max_age_days\", \"checks\": [...]}]}",
        )
    return cast(dict[str, Any], mapping)  # checked above: a controls mapping


def assessment_results(
    verification: Verification, evidence: Evidence, controls: dict[str, Any], at: datetime | None = None
) -> bytes:
    """The OSCAL Assessment Results document of one bundle, as canonical JSON bytes."""
    manifest = evidence.manifest
    tenant, period, identity = manifest["tenant"], manifest["period"], manifest["identity"]
    collected = evidence.witnessed_at or datetime.fromisoformat(manifest["ledger"]["published_at"])
    assessed = at or collected
    age = assessed - collected
    start = datetime.strptime(period, "%Y-%m").replace(tzinfo=timezone.utc)
    end = (start + timedelta(days=32)).replace(day=1)
    outcomes = {check.name: check.passed for check in verification.checks}
    seed = f"{identity}|{_time(assessed)}|{json.dumps(controls, sort_keys=True)}|" + json.dumps(
        outcomes, sort_keys=True
    )
    observation_uuid = _uuid("observation", seed)
    findings = []
    for control in controls["controls"]:
        ran = [name for name in control["checks"] if name in outcomes]
        satisfied = bool(ran) and all(outcomes[name] for name in ran)
        stale = age > timedelta(days=control["max_age_days"])
        findings.append(
            {
                "uuid": _uuid(f"finding {control['control_id']}", seed),
                "title": f"{control['control_id'].upper()} {control['title']}: {tenant} {period}",
                "description": f"Checks {', '.join(ran) or 'none'} of the {period} evidence bundle "
                + ("all passed." if satisfied else "did not all pass."),
                "props": [
                    _prop("freshness", "stale" if stale else "fresh"),
                    _prop("evidence-age-days", str(age.days)),
                    _prop("max-age-days", str(control["max_age_days"])),
                ],
                "target": {
                    "type": "objective-id",
                    "target-id": f"{control['control_id']}_obj",
                    "status": {"state": "satisfied" if satisfied else "not-satisfied"},
                },
                "related-observations": [{"observation-uuid": observation_uuid}],
            }
        )
    prefix = f"bundles/{tenant}/{period}/{identity}"
    artifacts = manifest["artifacts"]
    observation = {
        "uuid": observation_uuid,
        "title": f"Evidence bundle {tenant} {period}",
        "description": f"`evidence verify` of bundle {identity}: "
        + ", ".join(f"{name} {'passed' if passed else 'failed'}" for name, passed in outcomes.items()),
        "props": [
            _prop("tenant", tenant),
            _prop("period", period),
            _prop("bundle-identity", identity),
            _prop("ledger-seq", str(manifest["ledger"]["seq"])),
            *([_prop("leaf-index", str(evidence.leaf_index))] if evidence.leaf_index is not None else []),
            *([_prop("checkpoint-size", str(evidence.checkpoint_size))] if evidence.checkpoint_size else []),
            _prop("time-source", "witness-cosignature" if evidence.witnessed_at else "ledger-publication"),
            *[
                _prop(f"check-{name.replace('_', '-')}", "passed" if passed else "failed")
                for name, passed in outcomes.items()
            ],
        ],
        "methods": ["TEST"],
        "relevant-evidence": [
            {
                "href": f"{prefix}/{name}",
                "description": f"{name} of the bundle, sha256 {artifacts[name]['sha256']}",
                "props": [_prop("sha256", artifacts[name]["sha256"])],
            }
            for name in sorted(artifacts)
        ],
        "collected": _time(collected),
        "expires": _time(collected + timedelta(days=min(c["max_age_days"] for c in controls["controls"]))),
    }
    document = {
        "assessment-results": {
            "uuid": _uuid("assessment-results", seed),
            "metadata": {
                "title": f"Monthly evidence of {tenant}, {period}",
                "last-modified": _time(assessed),
                "version": identity[:12],
                "oscal-version": OSCAL_VERSION,
            },
            "import-ap": {"href": controls["catalog"]},
            "results": [
                {
                    "uuid": _uuid("result", seed),
                    "title": f"Evidence of {tenant} for {period}",
                    "description": f"The signed monthly evidence of {tenant} for {period}, verified offline.",
                    "start": _time(start),
                    "end": _time(end),
                    "reviewed-controls": {
                        "control-selections": [
                            {
                                "include-controls": [
                                    {"control-id": control["control_id"]} for control in controls["controls"]
                                ]
                            }
                        ]
                    },
                    "observations": [observation],
                    "findings": findings,
                }
            ],
        }
    }
    return json.dumps(document, indent=2, sort_keys=True).encode() + b"\n"


def package_assessment_results(tenant: str, documents: list[bytes]) -> bytes:
    """One Assessment Results document of a whole package: the result of each tenant-month's document, in the
    index's order, byte for byte the same object as in that document (so a compliance platform that imports both
    sees one result, not two). Its UUID and version derive from theirs; last-modified is the latest of theirs."""
    parsed = [json.loads(document)["assessment-results"] for document in documents]
    periods = [
        {p["name"]: p["value"] for p in one["results"][0]["observations"][0]["props"]}["period"] for one in parsed
    ]
    seed = "|".join(one["uuid"] for one in parsed)
    document = {
        "assessment-results": {
            "uuid": _uuid("package-assessment-results", seed),
            "metadata": {
                "title": f"Monthly evidence of {tenant}, {min(periods)} to {max(periods)}",
                "last-modified": max(one["metadata"]["last-modified"] for one in parsed),
                "version": hashlib.sha256(seed.encode()).hexdigest()[:12],
                "oscal-version": OSCAL_VERSION,
            },
            "import-ap": parsed[0]["import-ap"],
            "results": [result for one in parsed for result in one["results"]],
        }
    }
    return json.dumps(document, indent=2, sort_keys=True).encode() + b"\n"


def check_package_bound(document: bytes, documents: list[bytes]) -> None:
    """The package's Assessment Results are exactly the tenant-months' (each bound to its bundle by
    check_bound), in order (ASSESSMENT_MISMATCH otherwise)."""
    parsed: Any = jsonread.loads(document, ReasonCode.ASSESSMENT_MISMATCH, "the package's assessment results")
    try:
        bound = parsed["assessment-results"]["results"] == [
            result for one in documents for result in json.loads(one)["assessment-results"]["results"]
        ]
    except (KeyError, TypeError, ValueError):
        bound = False
    if not bound:
        raise EvidenceError(
            ReasonCode.ASSESSMENT_MISMATCH,
            "the package's assessment results are not the results "
            "of its tenant-months' assessment results, in the index's order",
        )


def check_bound(document: bytes, manifest: Any) -> None:
    """An Assessment Results document of ours is about this bundle: its window is the bundle's month, and its
    observation names the bundle's identity and ledger seq and links each of its files by its sha256
    (ASSESSMENT_MISMATCH otherwise)."""
    parsed: Any = jsonread.loads(document, ReasonCode.ASSESSMENT_MISMATCH, "the assessment results")
    try:
        (result,) = parsed["assessment-results"]["results"]
        (observation,) = result["observations"]
        props = {p["name"]: p["value"] for p in observation["props"] if p.get("ns") == NS}
        linked = {e["href"]: e["props"][0]["value"] for e in observation["relevant-evidence"]}
        prefix = f"bundles/{manifest['tenant']}/{manifest['period']}/{manifest['identity']}"
        bound = (
            result["start"] == f"{manifest['period']}-01T00:00:00Z"
            and (props["tenant"], props["period"], props["bundle-identity"], props["ledger-seq"])
            == (manifest["tenant"], manifest["period"], manifest["identity"], str(manifest["ledger"]["seq"]))
            and linked == {f"{prefix}/{name}": a["sha256"] for name, a in manifest["artifacts"].items()}
        )
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):  # whatever its shape
        bound = False
    if not bound:
        raise EvidenceError(
            ReasonCode.ASSESSMENT_MISMATCH,
            "the assessment results are not about this bundle's month, identity, ledger position and files",
        )


def _uuid(kind: str, seed: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"{kind}|{seed}"))


def _prop(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "ns": NS, "value": value}


def _time(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
