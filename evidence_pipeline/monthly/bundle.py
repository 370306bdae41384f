"""The bundle contract: names, identity, statement predicate and manifest. Shared by publish and verify."""

from __future__ import annotations

import hashlib
import json
import re

from evidence_pipeline.models import LedgerEvent, TenantMonth
from evidence_pipeline.signing.dsse import canonical_json
from evidence_pipeline.store import ArtifactStore

REPORT = "report.pdf"
STATEMENT = "statement.dsse.json"
MANIFEST = "manifest.json"
MANIFEST_SCHEMA = "evidence-bundle-manifest/v1"
# A B-LTA report's document time stamp renewed (`evidence timestamps renew`): a new file beside the published one,
# `renewals/0001.pdf`, `0002.pdf`, ..., each the previous one followed by one incremental update (DSS + document time
# stamp). The statement and the manifest keep describing the report as published, whose exact bytes each renewal
# begins with; verification validates the newest renewal's signatures.
RENEWALS = "renewals"
_RENEWAL = re.compile(r"[0-9]{4}\.pdf")
# What makes two bundles "the same evidence": the signed bytes differ per attempt, these never do.
IDENTITY_FIELDS = ("tenant", "period", "source_sha256", "unsigned_sha256", "renderer_version", "policy_version")
# Why a bundle supersedes the tenant-month's previous one: each input that differs, named. Only when none does (the
# same inputs gave other report bytes) is the reason the unsigned report itself.
SUPERSEDES_REASONS = {
    "source_sha256": "source_revision",
    "documents_sha256": "document_outcomes",
    "renderer_version": "renderer_version",
    "policy_version": "policy_version",
}
UNSIGNED_REPORT_REASON = "unsigned_report"


def identity_fields(
    tenant_month: TenantMonth, source_sha256: str, unsigned_sha256: str, renderer_version: str, policy_version: str
) -> dict:
    return {
        "tenant": tenant_month.tenant,
        "period": tenant_month.period,
        "source_sha256": source_sha256,
        "unsigned_sha256": unsigned_sha256,
        "renderer_version": renderer_version,
        "policy_version": policy_version,
    }


def bundle_identity(fields: dict) -> str:
    return hashlib.sha256(canonical_json({name: fields[name] for name in IDENTITY_FIELDS})).hexdigest()


def bundle_prefix(tenant_month: TenantMonth, identity: str) -> str:
    return f"bundles/{tenant_month.tenant}/{tenant_month.period}/{identity}"


def supersedes_link(previous: dict, fields: dict) -> dict:
    """The `supersedes` of a new bundle: the previous bundle's identity and prefix, and why the new one differs.

    ``previous`` are the details of the previous bundle's `bundle.published` event, ``fields`` the new bundle's
    identity fields and ``documents_sha256``."""
    reason = [name for field, name in SUPERSEDES_REASONS.items() if previous.get(field) != fields.get(field)]
    return {
        "identity": previous["identity"],
        "prefix": bundle_prefix(TenantMonth(previous["tenant"], previous["period"]), previous["identity"]),
        "reason": reason or [UNSIGNED_REPORT_REASON],
    }


def renewal_key(prefix: str, number: int) -> str:
    """The key of the bundle's report at renewal ``number``; 0 is `report.pdf` as published."""
    return f"{prefix}/{RENEWALS}/{number:04d}.pdf" if number else f"{prefix}/{REPORT}"


def newest_report(store: ArtifactStore, prefix: str) -> tuple[str, int]:
    """(key, renewal number) of the bundle's newest report: its newest renewal, or `report.pdf` (0)."""
    numbers = [
        int(key.rsplit("/", 1)[1][:4])
        for key in store.list(f"{prefix}/{RENEWALS}")
        if _RENEWAL.fullmatch(key.rsplit("/", 1)[1])
    ]
    newest = max(numbers, default=0)
    return renewal_key(prefix, newest), newest


def staging_key(unsigned_sha256: str) -> str:
    return f"reports/{unsigned_sha256}.pdf"


def build_manifest(event: LedgerEvent) -> bytes:
    """The manifest is a pure function of the committed `bundle.published` event: a retry rewrites the same bytes."""
    manifest = manifest_document(event.body["details"], ledger_position(event))
    return json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n"


def ledger_position(event: LedgerEvent) -> dict:
    """The manifest's `ledger` block: where the publication event sits in the ledger (checked by ledger prove)."""
    return {"seq": event.seq, "event_hash": event.event_hash, "published_at": event.body["recorded_at"]}


def manifest_document(d: dict, ledger: dict) -> dict:
    """Every manifest field, from the publication's details (or the statement's predicate and the files)."""
    return {
        "schema": MANIFEST_SCHEMA,
        "identity": d["identity"],
        "tenant": d["tenant"],
        "period": d["period"],
        "source": {"sha256": d["source_sha256"], "sequence": d["source_sequence"]},
        "document_outcomes": {"sha256": d["documents_sha256"]},
        "renderer_version": d["renderer_version"],
        "policy_version": d["policy_version"],
        "unsigned_report": {"sha256": d["unsigned_sha256"], "size": d["unsigned_size"]},
        "artifacts": {
            REPORT: _artifact(d["report_sha256"], d["report_size"], d.get("report_version_id")),
            STATEMENT: _artifact(d["statement_sha256"], d["statement_size"], d.get("statement_version_id")),
        },
        "keys": {"statement_key_id": d["key_id"], "trust_root_id": d["trust_root_id"]}
        | ({"tsa_root_id": d["tsa_root_id"]} if "tsa_root_id" in d else {})
        | ({"signed_at": d["signed_at"]} if "signed_at" in d else {}),  # bundles since key rotation
        "pades_level": d["pades_level"],
        "lineage": lineage(d),
        "published_by": {"run_id": d["run_id"], "attempt": d["attempt"]},
        "ledger": ledger,
    } | ({"supersedes": d["supersedes"]} if "supersedes" in d else {})


def lineage(d: dict) -> list[dict]:
    """Source revision and document outcomes -> unsigned report -> signed report -> statement, as the manifest
    records it; a correction begins with the bundle it supersedes and why."""
    corrects = d.get("supersedes")
    return (
        [{"step": "supersedes", "identity": corrects["identity"], "reason": corrects["reason"]}]
        if corrects is not None
        else []
    ) + [
        {"step": "source_revision", "sha256": d["source_sha256"]},
        {"step": "document_outcomes", "sha256": d["documents_sha256"]},
        {"step": "monthly_report", "sha256": d["unsigned_sha256"], "renderer_version": d["renderer_version"]},
        {"step": "signed_report", "sha256": d["report_sha256"], "pades_level": d["pades_level"]},
        {"step": "statement", "sha256": d["statement_sha256"], "key_id": d["key_id"]},
    ]


def _artifact(sha256: str, size: int, version_id: str | None) -> dict:
    """A file's digest and size, and its object version where the archive is versioned (S3)."""
    return {"sha256": sha256, "size": size} | ({"version_id": version_id} if version_id else {})
