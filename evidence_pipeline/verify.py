"""Offline verification of a bundle from the archive alone: what an auditor runs.

Every check runs and reports; the bundle verifies only if all pass. Keys come from the archive's put-once
`keys/` folder. Where the archive holds a keyring document (keys/keyring-*.json), the statement keys and PAdES signer
certificates are the ones its newest document lists, signed by the trust root, and each signature must have been made
inside its key's validity window and before its revocation; pin the trust root with ``expected_root_ids``. An
archive from before key rotation has no keyring: any statement key under keys/ then verifies, and an auditor who
holds key ids from another channel pins them with ``expected_key_ids``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from cryptography import x509

from evidence_pipeline import jsonread
from evidence_pipeline.bundle import (
    IDENTITY_FIELDS,
    MANIFEST,
    MANIFEST_SCHEMA,
    REPORT,
    STATEMENT,
    bundle_identity,
    bundle_prefix,
    manifest_document,
)
from evidence_pipeline.config import PADES_LEVELS
from evidence_pipeline.errors import UNAVAILABLE_CODES, EvidenceError, ReasonCode
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.signing import dsse
from evidence_pipeline.signing.keyring_document import (
    KeyringDocument,
    SignatureTimes,
    check_key_at,
    keyring_documents,
    parse_time,
    read_published_keyring,
)
from evidence_pipeline.signing.keys import MAX_KEY_BYTES, certificate_id, published_statement_keys
from evidence_pipeline.signing.pades import SignatureFacts, verify_pdf_signature
from evidence_pipeline.store import ArtifactStore, sha256_hex

MAX_REPORT_BYTES = 1 << 30  # no unsigned report is larger (the 500-page benchmark report is far below)
SIGNATURE_ALLOWANCE = 1 << 20  # PAdES appends one signature: 8-16 KB reserved, plus an incremental update


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
    keyring_sequence: int | None = None  # the keyring document that vouched for the keys (None: no keyring)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(check.passed for check in self.checks)

    @property
    def codes(self) -> list[str]:
        return [check.code for check in self.checks if not check.passed and check.code]

    def as_dict(self) -> dict:
        return {
            "bundle": self.bundle, "ok": self.ok, "codes": self.codes, "statement_key_id": self.statement_key_id,
            "trust_root_id": self.trust_root_id, "keyring_sequence": self.keyring_sequence,
            "checks": [c.__dict__ for c in self.checks],
        }


def verify_bundle(
    store: ArtifactStore, prefix: str, expected_key_ids: frozenset[str] = frozenset(),
    expected_root_ids: frozenset[str] = frozenset(), at: datetime | None = None,
) -> Verification:
    """Every check of the bundle at ``prefix``; the PAdES signature is validated at ``at`` (now by default)."""
    result = Verification(bundle=store.uri(prefix))

    def run(name: str, check) -> object:
        try:
            value = check()
        except EvidenceError as error:
            if error.code in UNAVAILABLE_CODES:
                raise  # the archive could not be read: no finding about the bundle, an outage
            result.checks.append(Check(name, False, error.code, error.message))
            return None
        except (KeyError, TypeError, ValueError, AttributeError):
            result.checks.append(
                Check(name, False, ReasonCode.STATEMENT_INVALID, "malformed statement or manifest fields")
            )
            return None
        result.checks.append(Check(name, True))
        return value

    files = run("bundle_complete", lambda: _read_documents(store, prefix))
    if files is None:
        return result
    statement_bytes, manifest_bytes = files
    keyring: KeyringDocument | None = None
    documents = keyring_documents(store)
    if documents or (expected_root_ids and not expected_key_ids):  # pinning the root alone needs its keyring
        keyring = run("keyring", lambda: read_published_keyring(store, expected_root_ids, documents))
        if keyring is None:
            run("manifest_parses", lambda: _parse_manifest(manifest_bytes))
            return result  # no key can be judged without the keyring
        result.keyring_sequence = keyring.sequence
        keys = keyring.statement_keys(expected_key_ids)
    else:
        keys = published_statement_keys(store, expected_key_ids)
    manifest = run("manifest_parses", lambda: _parse_manifest(manifest_bytes))
    opened = run("statement_signature", lambda: dsse.open_statement(statement_bytes, keys))
    if opened is None:
        return result
    statement, signed_by = opened
    predicate = statement["predicate"]
    # Name the key that verified the signature, never the id the statement claims for itself.
    result.statement_key_id, result.trust_root_id = ",".join(signed_by), predicate.get("trust_root_id")
    run(
        "statement_key",
        lambda: _expect(
            (predicate.get("key_id"),) == signed_by,
            ReasonCode.STATEMENT_KEY_MISMATCH,
            "the statement names another key than the one whose signature verified it",
        ),
    )
    # The signed statement bounds the report: its unsigned bytes plus one signature. Nothing larger is read.
    report = run("report_size", lambda: store.get(f"{prefix}/{REPORT}", max_bytes=_report_limit(predicate)))
    if report is None:
        return result
    run(
        "subject_digest",
        lambda: _expect(
            statement.get("subject") == dsse.subject(REPORT, sha256_hex(report)),
            ReasonCode.SUBJECT_DIGEST_MISMATCH,
            "statement subject is not the sha256 of report.pdf",
        ),
    )
    pdf = run("pdf_signature", lambda: _verify_pades(store, report, predicate, expected_root_ids, at))
    if keyring is not None:
        run("signing_keys", lambda: _check_signing_keys(keyring, signed_by, predicate, pdf))
    run(
        "unsigned_report_digest",
        lambda: _expect(
            sha256_hex(report[: int(predicate.get("unsigned_size", 0))]) == predicate.get("unsigned_sha256"),
            ReasonCode.UNSIGNED_DIGEST_MISMATCH,
            "report.pdf does not begin with the recorded unsigned report",
        ),
    )
    run("identity", lambda: _check_identity(prefix, predicate))
    if manifest is not None:
        run(
            "manifest_matches_statement",
            lambda: _check_manifest(manifest, predicate, _file_facts(store, prefix, report, statement_bytes)),
        )
    return result


def _read_documents(store: ArtifactStore, prefix: str) -> tuple[bytes, bytes]:
    """The statement and the manifest, each capped before it is read; the report is read once bounded."""
    missing = [name for name in (REPORT, STATEMENT, MANIFEST) if not store.exists(f"{prefix}/{name}")]
    if missing:
        raise EvidenceError(ReasonCode.BUNDLE_INCOMPLETE, f"bundle is missing {', '.join(missing)} (never committed?)")
    return tuple(store.get(f"{prefix}/{name}", max_bytes=jsonread.MAX_BYTES) for name in (STATEMENT, MANIFEST))


def _report_limit(predicate: dict) -> int:
    unsigned_size = predicate.get("unsigned_size")
    if type(unsigned_size) is not int or not 0 < unsigned_size <= MAX_REPORT_BYTES:
        raise EvidenceError(ReasonCode.STATEMENT_INVALID, "the statement records no plausible unsigned report size")
    return unsigned_size + SIGNATURE_ALLOWANCE


def _verify_pades(store: ArtifactStore, report: bytes, predicate: dict, expected_root_ids: frozenset[str],
                  at: datetime | None) -> SignatureFacts:
    """At the PAdES level the signed statement names; time stamps must chain to the TSA root it names."""
    level = predicate.get("pades_level")
    if level not in PADES_LEVELS:
        raise EvidenceError(ReasonCode.STATEMENT_INVALID, "the statement names no known PAdES level")
    tsa_root = _trust_root(store, str(predicate.get("tsa_root_id", "")), expected_root_ids) if level != "B-B" else None
    root = _trust_root(store, str(predicate.get("trust_root_id", "")), expected_root_ids)
    return verify_pdf_signature(report, root, level, tsa_root, at)


def _check_signing_keys(keyring: KeyringDocument, signed_by: tuple[str, ...], predicate: dict,
                        pdf: SignatureFacts | None) -> None:
    """The statement key and the PDF's signer certificate are listed in the keyring, and each signed inside its
    generation's validity window and before any revocation of it.

    The statement records when its key was chosen (``signed_at``; bundles from before key rotation only have
    ``completed_at``, taken just after the PDF was signed). That time is the signer's own claim. At B-T and above
    the PDF's RFC 3161 time stamp is the trustworthy time: it bounds the PDF signature from above, and the statement
    (which signs the time-stamped report's digest) from below, so a revoked or retired key cannot be made to look
    older than the time stamp authority says."""
    if keyring.trust_root_id != predicate.get("trust_root_id"):
        raise EvidenceError(ReasonCode.KEY_UNKNOWN, f"the keyring is vouched for by {keyring.trust_root_id}, "
                            "not by the bundle's trust root")
    stamped = (pdf.stamped,) if pdf is not None and pdf.stamped else ()
    if "signed_at" in predicate:
        times = SignatureTimes(selected=parse_time(predicate["signed_at"]), after=stamped)
    else:
        times = SignatureTimes(made=(parse_time(predicate["completed_at"]),), after=stamped)
    for key_id in signed_by:
        check_key_at(keyring, key_id, times, "statement key")
    if pdf is not None:
        made = tuple(moment for moment in (pdf.claimed, pdf.stamped) if moment is not None)
        check_key_at(keyring, pdf.signer_certificate_id, SignatureTimes(made=made), "PDF signer certificate")


def _trust_root(store: ArtifactStore, root_id: str, expected: frozenset[str]) -> bytes:
    if not root_id.startswith("x509-root-") or (expected and root_id not in expected):
        raise EvidenceError(ReasonCode.PDF_SIGNATURE_UNTRUSTED, "statement names no trusted, published trust root")
    try:
        pem = store.get(f"keys/{root_id}.pem", max_bytes=MAX_KEY_BYTES)
        matches = certificate_id(x509.load_pem_x509_certificate(pem)) == root_id
    except (EvidenceError, ValueError):
        matches = False
    if not matches:  # the id names the certificate's own bytes: a swapped file cannot borrow it
        raise EvidenceError(
            ReasonCode.PDF_SIGNATURE_UNTRUSTED, "the statement's trust root is not published under its id"
        )
    return pem


def _parse_manifest(data: bytes) -> dict:
    manifest = jsonread.loads(data, ReasonCode.MANIFEST_INVALID, "manifest.json")
    if not isinstance(manifest, dict) or manifest.get("schema") != MANIFEST_SCHEMA:
        raise EvidenceError(ReasonCode.MANIFEST_INVALID, f"manifest.json is not {MANIFEST_SCHEMA}")
    _expect(
        _is_ledger_position(manifest.get("ledger")),
        ReasonCode.MANIFEST_INVALID,
        "manifest.json has no well-formed ledger position",
    )
    return manifest


def _is_ledger_position(ledger) -> bool:
    """Only the ledger vouches for the position (`evidence ledger prove` checks it); offline, its shape is checked."""
    if not isinstance(ledger, dict) or ledger.keys() != {"seq", "event_hash", "published_at"}:
        return False
    seq, event_hash, published_at = ledger["seq"], ledger["event_hash"], ledger["published_at"]
    try:
        datetime.fromisoformat(published_at)
    except (TypeError, ValueError):
        return False
    return (
        type(seq) is int
        and seq >= 1
        and isinstance(event_hash, str)
        and re.fullmatch(r"[0-9a-f]{64}", event_hash) is not None
    )


def _check_identity(prefix: str, predicate: dict) -> None:
    try:
        identity = bundle_identity(predicate)
        expected_prefix = bundle_prefix(TenantMonth(predicate["tenant"], predicate["period"]), identity)
    except (KeyError, EvidenceError):
        raise EvidenceError(ReasonCode.STATEMENT_INVALID, f"statement predicate lacks {IDENTITY_FIELDS}") from None
    _expect(
        identity == predicate.get("identity") and prefix == expected_prefix,
        ReasonCode.MANIFEST_STATEMENT_MISMATCH,
        "bundle location or identity does not match the statement",
    )


def _file_facts(store: ArtifactStore, prefix: str, report: bytes, statement: bytes) -> dict:
    """What the files themselves say, in the publication's field names."""
    return {
        "report_sha256": sha256_hex(report),
        "report_size": len(report),
        "statement_sha256": sha256_hex(statement),
        "statement_size": len(statement),
        "report_version_id": store.version_id(f"{prefix}/{REPORT}"),
        "statement_version_id": store.version_id(f"{prefix}/{STATEMENT}"),
    }


def _check_manifest(manifest: dict, predicate: dict, files: dict) -> None:
    """Every manifest field must be what the signed statement and the files say, except the ledger position
    (shape-checked by _parse_manifest, vouched for by the ledger); a field nothing vouches for is refused."""
    expected = manifest_document(predicate | files, manifest["ledger"])
    differing = sorted(name for name, value in expected.items() if manifest.get(name) != value)
    if manifest.keys() - expected.keys():
        differing.append("fields that nothing vouches for")
    _expect(not differing, ReasonCode.MANIFEST_STATEMENT_MISMATCH, f"manifest disagrees on {', '.join(differing)}")


def _expect(condition: bool, code: str, message: str) -> None:
    if not condition:
        raise EvidenceError(code, message)
