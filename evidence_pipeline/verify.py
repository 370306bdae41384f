"""Offline verification of a bundle from the archive alone: what an auditor runs.

Every check runs and reports; the bundle verifies only if all pass. Keys come from the archive's put-once
`keys/` folder; an auditor who holds key ids from another channel can pin them with ``expected_key_ids``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from evidence_pipeline.bundle import (
    IDENTITY_FIELDS, MANIFEST, MANIFEST_SCHEMA, REPORT, STATEMENT, bundle_identity, bundle_prefix, lineage,
)
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.signing import dsse
from cryptography import x509

from evidence_pipeline.signing.keys import certificate_id, published_statement_keys
from evidence_pipeline.signing.pades import verify_pdf_signature
from evidence_pipeline.store import ArtifactStore, sha256_hex


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    code: str | None = None
    detail: str = ""


@dataclass
class Verification:
    bundle: str
    checks: list[Check] = field(default_factory=list)
    statement_key_id: str | None = None  # who vouched: pin these with --key-id / --root-id
    trust_root_id: str | None = None

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(check.passed for check in self.checks)

    @property
    def codes(self) -> list[str]:
        return [check.code for check in self.checks if not check.passed and check.code]

    def as_dict(self) -> dict:
        return {
            "bundle": self.bundle, "ok": self.ok, "codes": self.codes, "statement_key_id": self.statement_key_id,
            "trust_root_id": self.trust_root_id, "checks": [c.__dict__ for c in self.checks],
        }


def verify_bundle(
    store: ArtifactStore, prefix: str, expected_key_ids: frozenset[str] = frozenset(),
    expected_root_ids: frozenset[str] = frozenset(),
) -> Verification:
    result = Verification(bundle=store.uri(prefix))

    def run(name: str, check) -> object:
        try:
            value = check()
        except EvidenceError as error:
            result.checks.append(Check(name, False, error.code, error.message))
            return None
        except (KeyError, TypeError, ValueError, AttributeError):
            result.checks.append(Check(name, False, "STATEMENT_INVALID", "malformed statement or manifest fields"))
            return None
        result.checks.append(Check(name, True))
        return value

    files = run("bundle_complete", lambda: _read_files(store, prefix))
    if files is None:
        return result
    report, statement_bytes, manifest_bytes = files
    keys = published_statement_keys(store, expected_key_ids)
    manifest = run("manifest_parses", lambda: _parse_manifest(manifest_bytes))
    statement = run("statement_signature", lambda: dsse.open_statement(statement_bytes, keys))
    if statement is None:
        return result
    predicate = statement["predicate"]
    result.statement_key_id, result.trust_root_id = predicate.get("key_id"), predicate.get("trust_root_id")
    run("subject_digest", lambda: _expect(
        statement["subject"] == [{"name": REPORT, "digest": {"sha256": sha256_hex(report)}}],
        "SUBJECT_DIGEST_MISMATCH", "statement subject is not the sha256 of report.pdf"))
    run("pdf_signature", lambda: verify_pdf_signature(
        report, _trust_root(store, str(predicate.get("trust_root_id", "")), expected_root_ids)))
    run("unsigned_report_digest", lambda: _expect(
        sha256_hex(report[: int(predicate.get("unsigned_size", 0))]) == predicate.get("unsigned_sha256"),
        "UNSIGNED_DIGEST_MISMATCH", "report.pdf does not begin with the recorded unsigned report"))
    run("identity", lambda: _check_identity(prefix, predicate))
    if manifest is not None:
        run("manifest_matches_statement", lambda: _check_manifest(manifest, predicate, report, statement_bytes))
    return result


def _read_files(store: ArtifactStore, prefix: str) -> tuple[bytes, bytes, bytes]:
    missing = [name for name in (REPORT, STATEMENT, MANIFEST) if not store.exists(f"{prefix}/{name}")]
    if missing:
        raise EvidenceError("BUNDLE_INCOMPLETE", f"bundle is missing {', '.join(missing)} (never committed?)")
    return tuple(store.get(f"{prefix}/{name}") for name in (REPORT, STATEMENT, MANIFEST))


def _trust_root(store: ArtifactStore, root_id: str, expected: frozenset[str]) -> bytes:
    if not root_id.startswith("x509-root-") or (expected and root_id not in expected):
        raise EvidenceError("PDF_SIGNATURE_UNTRUSTED", "statement names no trusted, published trust root")
    try:
        pem = store.get(f"keys/{root_id}.pem")
        matches = certificate_id(x509.load_pem_x509_certificate(pem)) == root_id
    except (EvidenceError, ValueError):
        matches = False
    if not matches:  # the id names the certificate's own bytes: a swapped file cannot borrow it
        raise EvidenceError("PDF_SIGNATURE_UNTRUSTED", "the statement's trust root is not published under its id")
    return pem


def _parse_manifest(data: bytes) -> dict:
    try:
        manifest = json.loads(data)
    except ValueError:
        raise EvidenceError("MANIFEST_INVALID", "manifest.json is not JSON") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != MANIFEST_SCHEMA:
        raise EvidenceError("MANIFEST_INVALID", f"manifest.json is not {MANIFEST_SCHEMA}")
    return manifest


def _check_identity(prefix: str, predicate: dict) -> None:
    try:
        identity = bundle_identity(predicate)
        expected_prefix = bundle_prefix(TenantMonth(predicate["tenant"], predicate["period"]), identity)
    except (KeyError, EvidenceError):
        raise EvidenceError("STATEMENT_INVALID", f"statement predicate lacks {IDENTITY_FIELDS}") from None
    _expect(identity == predicate.get("identity") and prefix == expected_prefix,
            "MANIFEST_STATEMENT_MISMATCH", "bundle location or identity does not match the statement")


def _check_manifest(manifest: dict, predicate: dict, report: bytes, statement: bytes) -> None:
    pairs = {
        "identity": (manifest.get("identity"), predicate.get("identity")),
        "tenant": (manifest.get("tenant"), predicate.get("tenant")),
        "period": (manifest.get("period"), predicate.get("period")),
        "source": (manifest.get("source"), {"sha256": predicate.get("source_sha256"),
                                            "sequence": predicate.get("source_sequence")}),
        "renderer_version": (manifest.get("renderer_version"), predicate.get("renderer_version")),
        "policy_version": (manifest.get("policy_version"), predicate.get("policy_version")),
        "unsigned_report": (manifest.get("unsigned_report"), {"sha256": predicate.get("unsigned_sha256"),
                                                              "size": predicate.get("unsigned_size")}),
        "keys": (manifest.get("keys"), {"statement_key_id": predicate.get("key_id"),
                                        "trust_root_id": predicate.get("trust_root_id")}),
        "pades_level": (manifest.get("pades_level"), predicate.get("pades_level")),
        "published_by": (manifest.get("published_by"), {"run_id": predicate.get("run_id"),
                                                        "attempt": predicate.get("attempt")}),
        "lineage": (manifest.get("lineage"), lineage(predicate | {
            "report_sha256": sha256_hex(report), "statement_sha256": sha256_hex(statement)})),
        "artifacts": (_digests(manifest.get("artifacts")), {
            REPORT: {"sha256": sha256_hex(report), "size": len(report)},
            STATEMENT: {"sha256": sha256_hex(statement), "size": len(statement)},
        }),
    }
    differing = sorted(name for name, (left, right) in pairs.items() if left != right)
    _expect(not differing, "MANIFEST_STATEMENT_MISMATCH", f"manifest disagrees on {', '.join(differing)}")


def _digests(artifacts) -> dict | None:
    """The manifest's digests and sizes, without version ids (only versioned archives have those)."""
    if not isinstance(artifacts, dict):
        return None
    return {name: {k: v for k, v in entry.items() if k != "version_id"} for name, entry in artifacts.items()
            if isinstance(entry, dict)}


def _expect(condition: bool, code: str, message: str) -> None:
    if not condition:
        raise EvidenceError(code, message)
