"""Offline verification of a bundle from the archive alone: what an auditor runs.

Every check runs and reports; the bundle verifies only if all pass. Keys come from the archive's put-once
`keys/` folder. Where the archive holds a keyring document (keys/keyring-*.json), the statement keys and PAdES signer
certificates are the ones its newest document lists, signed by the trust root, and each signature must have been made
inside its key's validity window and before its revocation; pin the trust root with ``expected_root_ids``. An
archive from before key rotation has no keyring: any statement key under keys/ then verifies, and an auditor who
holds key ids from another channel pins them with ``expected_key_ids``.

A B-LTA bundle whose document time stamp was renewed (`evidence timestamps renew`) holds its renewed reports beside
`report.pdf`; the newest must begin with the published report's bytes, and its signature and document time stamps
are the ones validated.

It also places the bundle in its tenant-month's corrections chain, from the archive it reads: the bundle it
supersedes (named in its signed statement, and whether the archive holds it), and the published bundles of the
same tenant-month whose signed statements supersede it, followed to the newest, the current one. A superseded
bundle is still valid evidence (it verifies, exit 0); it is not the current evidence of its tenant-month.

Over 400 lines because every check of a bundle is here, in the order `verify_bundle` runs them: an auditor reads
what "verified" means in one file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline import jsonread
from evidence_pipeline.config import PADES_LEVELS
from evidence_pipeline.errors import UNAVAILABLE_CODES, EvidenceError, ReasonCode
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.monthly.bundle import (
    IDENTITY_FIELDS,
    MANIFEST,
    MANIFEST_SCHEMA,
    REPORT,
    STATEMENT,
    bundle_identity,
    bundle_prefix,
    manifest_document,
    newest_report,
)
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
from evidence_pipeline.signing.pades import SignatureFacts, extends_with_timestamp, verify_pdf_signature
from evidence_pipeline.store import ArtifactStore, sha256_hex

if TYPE_CHECKING:
    from evidence_pipeline.runtime import Runtime

_IDENTITY = re.compile(r"[0-9a-f]{64}")
MAX_REPORT_BYTES = 1 << 30  # no unsigned report is larger (the 500-page benchmark report is far below)
SIGNATURE_ALLOWANCE = 1 << 20  # PAdES appends one signature: 8-16 KB reserved, plus an incremental update
Checked = TypeVar("Checked")  # what one check of verify_bundle returns


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
    supersedes: dict[str, Any] | None = None  # {identity, prefix, reason, in_archive}: the bundle this one corrects
    superseded_by: dict[str, Any] | None = None  # {identity, prefix}: the published bundle that corrects this one
    # {identity, prefix}: the newest bundle of the chain (this one if current)
    current_bundle: dict[str, Any] | None = None
    keyring_sequence: int | None = None  # the keyring document that vouched for the keys (None: no keyring)

    @property
    def current(self) -> bool | None:
        """Whether this is its tenant-month's current bundle in the archive; None when it was not determined."""
        return None if self.current_bundle is None else self.superseded_by is None

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(check.passed for check in self.checks)

    @property
    def codes(self) -> list[str]:
        return [check.code for check in self.checks if not check.passed and check.code]

    def as_dict(self) -> dict[str, Any]:
        return {
            "bundle": self.bundle,
            "ok": self.ok,
            "codes": self.codes,
            "statement_key_id": self.statement_key_id,
            "trust_root_id": self.trust_root_id,
            "keyring_sequence": self.keyring_sequence,
            "current": self.current,
            "supersedes": self.supersedes,
            "superseded_by": self.superseded_by,
            "current_bundle": self.current_bundle,
            "checks": [c.__dict__ for c in self.checks],
        }


def verify_published(rt: Runtime, published: tuple[str, str]) -> Verification:
    """One bundle of ``rt``'s archive, (bundle key, key id), with the statement key pinned to the one recorded at
    publication: what the verification check and the bundle step record for a tenant-month."""
    bundle_key, key_id = published
    return verify_bundle(rt.archive, bundle_key, expected_key_ids=frozenset({key_id}))


def verify_bundle(
    store: ArtifactStore,
    prefix: str,
    expected_key_ids: frozenset[str] = frozenset(),
    expected_root_ids: frozenset[str] = frozenset(),
    at: datetime | None = None,
) -> Verification:
    """Every check of the bundle at ``prefix``; the PAdES signature is validated at ``at`` (now by default)."""
    result = Verification(bundle=store.uri(prefix))
    store = _KeysReadOnce(store)

    def run(name: str, check: Callable[[], Checked]) -> Checked | None:
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
    (statement_bytes, statement_version), manifest_bytes = files
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
    read = run("report_size", lambda: store.get_versioned(f"{prefix}/{REPORT}", max_bytes=_report_limit(predicate)))
    if read is None:
        return result
    report, report_version = read
    run(
        "subject_digest",
        lambda: _expect(
            statement.get("subject") == dsse.subject(REPORT, sha256_hex(report)),
            ReasonCode.SUBJECT_DIGEST_MISMATCH,
            "statement subject is not the sha256 of report.pdf",
        ),
    )
    signed, (renewal, number) = (
        report,
        (newest_report(store, prefix) if predicate.get("pades_level") == "B-LTA" else (None, 0)),
    )  # only a document time stamp is renewed
    if number:  # a renewed B-LTA report: its newest renewal's signatures are validated
        signed = run("renewal", lambda: _read_renewal(store, cast(str, renewal), number, report))  # renewed: a key
    pdf = (
        run("pdf_signature", lambda: _verify_pades(store, signed, predicate, expected_root_ids, at))
        if signed is not None
        else None
    )
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
    if "supersedes" in predicate:
        result.supersedes = run("supersedes", lambda: _supersedes(store, predicate))
    if manifest is not None:
        run(
            "manifest_matches_statement",
            lambda: _check_manifest(
                manifest, predicate, _file_facts((report, report_version), (statement_bytes, statement_version))
            ),
        )
    chain = run("corrections_chain", lambda: _place_in_chain(store, prefix, keys))
    if chain is not None:
        result.superseded_by, result.current_bundle = chain
    return result


class _KeysReadOnce:
    """The archive as one verification reads it: an object under keys/ is fetched once, though the keyring check
    and the PDF check both read the trust root. Those objects are put-once; nothing outlives the verification."""

    def __init__(self, store: ArtifactStore):
        self._store = store
        self._keys: dict[tuple[str, int | None], bytes] = {}

    def get(self, key: str, expected_sha256: str | None = None, max_bytes: int | None = None) -> bytes:
        if not key.startswith("keys/") or expected_sha256 is not None:
            return self._store.get(key, expected_sha256, max_bytes)
        if (key, max_bytes) not in self._keys:
            self._keys[key, max_bytes] = self._store.get(key, max_bytes=max_bytes)
        return self._keys[key, max_bytes]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _read_documents(store: ArtifactStore, prefix: str) -> tuple[tuple[bytes, str | None], bytes]:
    """((the statement, its version id), the manifest), each capped before it is read, once the report is known to
    be there (it is read once, bounded by the statement). Which files are missing is asked only when one is."""

    def read() -> tuple[tuple[bytes, str | None], bytes]:
        return (
            store.get_versioned(f"{prefix}/{STATEMENT}", max_bytes=jsonread.MAX_BYTES),
            store.get(f"{prefix}/{MANIFEST}", max_bytes=jsonread.MAX_BYTES),
        )

    try:
        if store.exists(f"{prefix}/{REPORT}"):
            return read()
    except EvidenceError as error:
        if error.code != ReasonCode.STORE_NOT_FOUND:
            raise
    missing = [name for name in (REPORT, STATEMENT, MANIFEST) if not store.exists(f"{prefix}/{name}")]
    if missing:
        raise EvidenceError(ReasonCode.BUNDLE_INCOMPLETE, f"bundle is missing {', '.join(missing)} (never committed?)")
    return read()  # published meanwhile


def _read_renewal(store: ArtifactStore, key: str, number: int, report: bytes) -> bytes:
    """The bundle's newest renewed report: the published report's exact bytes (what the statement signs), then
    incremental updates ending with a new document time stamp, which the PAdES validation judges."""
    renewed = store.get(key, max_bytes=len(report) + number * SIGNATURE_ALLOWANCE)
    _expect(
        extends_with_timestamp(renewed, report),
        ReasonCode.RENEWAL_INVALID,
        f"renewal {number} does not extend the published report.pdf with a new document time stamp",
    )
    return renewed


def _report_limit(predicate: dict[str, Any]) -> int:
    unsigned_size = predicate.get("unsigned_size")
    if type(unsigned_size) is not int or not 0 < unsigned_size <= MAX_REPORT_BYTES:
        raise EvidenceError(ReasonCode.STATEMENT_INVALID, "the statement records no plausible unsigned report size")
    return unsigned_size + SIGNATURE_ALLOWANCE


def _verify_pades(
    store: ArtifactStore,
    report: bytes,
    predicate: dict[str, Any],
    expected_root_ids: frozenset[str],
    at: datetime | None,
) -> SignatureFacts:
    """At the PAdES level the signed statement names; time stamps must chain to the TSA root it names."""
    level = predicate.get("pades_level")
    if level not in PADES_LEVELS:
        raise EvidenceError(ReasonCode.STATEMENT_INVALID, "the statement names no known PAdES level")
    tsa_root = trust_root(store, str(predicate.get("tsa_root_id", "")), expected_root_ids) if level != "B-B" else None
    root = trust_root(store, str(predicate.get("trust_root_id", "")), expected_root_ids)
    return verify_pdf_signature(report, root, level=level, tsa_root_pem=tsa_root, at=at)


def _check_signing_keys(
    keyring: KeyringDocument, signed_by: tuple[str, ...], predicate: dict[str, Any], pdf: SignatureFacts | None
) -> None:
    """The statement key and the PDF's signer certificate are listed in the keyring, and each signed inside its
    generation's validity window and before any revocation of it.

    The statement records when its key was chosen (``signed_at``; bundles from before key rotation only have
    ``completed_at``, taken just after the PDF was signed). That time is the signer's own claim. At B-T and above
    the PDF's RFC 3161 time stamp is the trustworthy time: it bounds the PDF signature from above, and the statement
    (which signs the time-stamped report's digest) from below, so a revoked or retired key cannot be made to look
    older than the time stamp authority says."""
    if keyring.trust_root_id != predicate.get("trust_root_id"):
        raise EvidenceError(
            ReasonCode.KEY_UNKNOWN,
            f"the keyring is vouched for by {keyring.trust_root_id}, not by the bundle's trust root",
        )
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


def trust_root(store: ArtifactStore, root_id: str, expected: frozenset[str]) -> bytes:
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


def _parse_manifest(data: bytes) -> dict[str, Any]:
    manifest = jsonread.loads(data, ReasonCode.MANIFEST_INVALID, "manifest.json")
    if not isinstance(manifest, dict) or manifest.get("schema") != MANIFEST_SCHEMA:
        raise EvidenceError(ReasonCode.MANIFEST_INVALID, f"manifest.json is not {MANIFEST_SCHEMA}")
    _expect(
        _is_ledger_position(manifest.get("ledger")),
        ReasonCode.MANIFEST_INVALID,
        "manifest.json has no well-formed ledger position",
    )
    return manifest


def _is_ledger_position(ledger: object) -> bool:
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


def _check_identity(prefix: str, predicate: dict[str, Any]) -> None:
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


def _supersedes(store: ArtifactStore, predicate: dict[str, Any]) -> dict[str, Any]:
    """The signed `supersedes`: a well-formed link to another bundle of the same tenant-month, and whether this
    archive holds that bundle. Its absence is reported, not a failure: the link is signed evidence of the
    correction whatever the archive holds, and a partial copy of an archive cannot be told from a deletion (the
    ledger, `evidence ledger verify`, is the authority on what was published)."""
    link = predicate["supersedes"]
    tenant_month = TenantMonth(predicate["tenant"], predicate["period"])
    reason = link.get("reason") if isinstance(link, dict) else None
    _expect(
        isinstance(link, dict)
        and link.keys() == {"identity", "prefix", "reason"}
        and isinstance(link["identity"], str)
        and _IDENTITY.fullmatch(link["identity"]) is not None
        and link["identity"] != predicate.get("identity")
        and link["prefix"] == bundle_prefix(tenant_month, link["identity"])
        and isinstance(reason, list)
        and reason
        and all(isinstance(name, str) for name in reason),
        ReasonCode.STATEMENT_INVALID,
        "the statement's supersedes is not a link to another bundle of its tenant-month",
    )
    in_archive = all(store.exists(f"{link['prefix']}/{name}") for name in (REPORT, STATEMENT, MANIFEST))
    return {"identity": link["identity"], "prefix": link["prefix"], "reason": reason, "in_archive": in_archive}


def _place_in_chain(
    store: ArtifactStore, prefix: str, keys: dict[str, ed25519.Ed25519PublicKey]
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(the bundle that supersedes this one or None, the newest bundle of its chain) among the published bundles
    of its tenant-month in this archive. Only a complete bundle (its manifest is written after the ledger commit)
    whose statement verifies counts: an unsigned or uncommitted claim cannot make a bundle look superseded. Two
    that supersede the same bundle break the chain: SUPERSEDES_FORKED."""
    month = prefix.rsplit("/", 1)[0]
    successors: dict[str, list[dict[str, Any]]] = {}
    depth = prefix.count("/") + 1  # the files of a bundle folder
    for other in sorted({key.rsplit("/", 1)[0] for key in store.list(month) if key.count("/") == depth}):
        link = _signed_link(store, other, keys) if other != prefix else None
        if link is not None:
            successors.setdefault(link["supersedes"], []).append({"identity": link["identity"], "prefix": other})
    this = {"identity": prefix.rsplit("/", 1)[1], "prefix": prefix}
    chain, seen = [this], {this["identity"]}
    while (following := successors.get(chain[-1]["identity"], [])) and following[0]["identity"] not in seen:
        if len(following) > 1:
            raise EvidenceError(
                ReasonCode.SUPERSEDES_FORKED,
                f"{len(following)} bundles supersede {chain[-1]['identity'][:12]}: "
                + ", ".join(bundle["identity"][:12] for bundle in following),
            )
        chain.append(following[0])
        seen.add(following[0]["identity"])
    return (chain[1] if len(chain) > 1 else None), chain[-1]


def _signed_link(store: ArtifactStore, prefix: str, keys: dict[str, ed25519.Ed25519PublicKey]) -> dict[str, Any] | None:
    """{identity, supersedes} of the published bundle at ``prefix`` if its statement verifies, belongs there
    and supersedes a bundle; None otherwise (it is verified, and reported, on its own)."""
    try:
        if not store.exists(f"{prefix}/{MANIFEST}"):
            return None
        statement, _ = dsse.open_statement(store.get(f"{prefix}/{STATEMENT}", max_bytes=jsonread.MAX_BYTES), keys)
        predicate = statement["predicate"]
        _check_identity(prefix, predicate)
        link = predicate.get("supersedes")
        if not isinstance(link, dict) or not isinstance(link.get("identity"), str):
            return None
        return {"identity": predicate["identity"], "supersedes": link["identity"]}
    except EvidenceError as error:
        if error.code in UNAVAILABLE_CODES:
            raise
        return None
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _file_facts(report: tuple[bytes, str | None], statement: tuple[bytes, str | None]) -> dict[str, Any]:
    """What the files themselves say, (bytes, version id) as read, in the publication's field names."""
    return {
        "report_sha256": sha256_hex(report[0]),
        "report_size": len(report[0]),
        "statement_sha256": sha256_hex(statement[0]),
        "statement_size": len(statement[0]),
        "report_version_id": report[1],
        "statement_version_id": statement[1],
    }


def _check_manifest(manifest: dict[str, Any], predicate: dict[str, Any], files: dict[str, Any]) -> None:
    """Every manifest field must be what the signed statement and the files say, except the ledger position
    (shape-checked by _parse_manifest, vouched for by the ledger); a field nothing vouches for is refused."""
    expected = manifest_document(predicate | files, manifest["ledger"])
    differing = sorted(name for name, value in expected.items() if manifest.get(name) != value)
    if manifest.keys() - expected.keys():
        differing.append("fields that nothing vouches for")
    _expect(not differing, ReasonCode.MANIFEST_STATEMENT_MISMATCH, f"manifest disagrees on {', '.join(differing)}")


def _expect(condition: object, code: str, message: str) -> None:
    if not condition:
        raise EvidenceError(code, message)
