"""A package's document artifacts, walked back to their uploads with nothing but the package (format version 2).

`evidence export` walks every output of the tenant's document jobs in the exported periods (redactions, review
decisions and approvals, split parts, merged documents) as `evidence lineage` does (audit/lineage.py) and packs
what the walk read: the archive objects, verbatim at their keys (artifacts, statements, manifests, signed copies,
signature-check records and decisions), every ledger event it met (events/<seq>.json) with its inclusion proof
against a packaged checkpoint (proofs/documents/<seq>.json; an event that is also an authorization event keeps
its proofs/authorizations/ proof), and each upload's digest, which its `document.admitted` event states. The
uploads' bytes are private: they are packed, as uploads/<tenant>/<sha256>, only when exported ``--with-uploads``.

The index's ``documents`` section lists them:

    {"artifacts": [artifact ids, the walks' starting points], "events": [seqs, ledger order],
     "objects": [archive keys], "with_uploads": bool,
     "derived_by": {"pades_level": …, "trust_root_id": …, "tsa_root_id": … or null}}

``evidence verify --package`` proves each event (one check each, ``document event <seq>``), then runs the same walk
over the package for each artifact (``lineage <artifact id>``): an event is in the log when its inclusion proof
reaches a verified checkpoint and its chain hash is sha256(prev_hash || bytes); the derived-by signatures are
checked against the trust roots the section names, under keys/ (and pinned by ``--root-id``). Nothing here opens a
database or a network connection.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, cast

from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline.audit.checkpoints import CheckpointKeys
from evidence_pipeline.audit.lineage import DerivedBy, walk
from evidence_pipeline.audit.package import (
    Index,
    PackageChecks,
    authorization_proof_path,
    prove_event,
    read_event,
    read_inclusion,
    run_check,
)
from evidence_pipeline.audit.verify import Check, trust_root
from evidence_pipeline.config import PADES_LEVELS
from evidence_pipeline.errors import UNAVAILABLE_CODES, EvidenceError, ReasonCode
from evidence_pipeline.models import TENANT_ID, ChainedEvent, EventType
from evidence_pipeline.store import ArtifactStore

DOCUMENT_PROOFS = "proofs/documents"
UPLOADS = "uploads"
_FIELDS = {"artifacts", "events", "objects", "with_uploads", "derived_by"}
_DERIVED_BY_FIELDS = {"pades_level", "trust_root_id", "tsa_root_id"}


def document_proof_path(seq: int) -> str:
    return f"{DOCUMENT_PROOFS}/{seq:012d}.json"


def upload_path(tenant: str, sha256: str) -> str:
    return f"{UPLOADS}/{tenant}/{sha256}"


def section_problem(section: dict[str, Any], tenant: str) -> str | None:
    """What is wrong with an index's documents section, or None."""
    prefix = f"documents/{tenant}/"
    try:
        if section.keys() != _FIELDS or section["derived_by"].keys() != _DERIVED_BY_FIELDS:
            return "has other fields than version 2 defines"
        if not all(
            isinstance(key, str) and key.startswith(prefix) for key in section["artifacts"] + section["objects"]
        ):
            return f"names an artifact or object that is not under {prefix}"
        events = section["events"]
        if not all(type(seq) is int and seq >= 1 for seq in events) or events != sorted(set(events)):
            return "lists document events out of ledger order or twice"
        if type(section["with_uploads"]) is not bool or section["derived_by"]["pades_level"] not in PADES_LEVELS:
            return "has no with_uploads flag or no known PAdES level"
    except (AttributeError, TypeError, KeyError):
        return "is not a documents section"
    return None


class PackageSource:
    """audit/lineage.py's Source over a package: its events, proved by their inclusion proofs."""

    def __init__(
        self,
        store: ArtifactStore,
        index: Index,
        statement_keys: dict[str, ed25519.Ed25519PublicKey],
        root_ids: frozenset[str],
    ):
        self.archive, self.index, self.statement_keys, self.root_ids = store, index, statement_keys, root_ids
        self.events: dict[int, ChainedEvent] = {}  # seq -> the event, as the walk reads it
        self.problems: dict[int, str] = {}  # seq -> why the event is not proved
        self._lookups: dict[
            tuple[str, str, str], dict[str, ChainedEvent]
        ] = {}  # built once every event is read (see _by)

    def prove(self, seq: int, roots: dict[str, tuple[int, bytes]]) -> None:
        """Read event ``seq`` and its proof; the event is kept (and walked) even when the proof fails, which the
        walk then reports as the link it breaks."""
        text, body = read_event(self.archive, seq, (self.index.tenant,))
        path = authorization_proof_path(seq) if seq in self.index.authorizations else document_proof_path(seq)
        self.problems[seq] = f"ledger event {seq} is not proved in a verified checkpoint"
        proof = read_inclusion(self.archive, path)
        self.events[seq] = ChainedEvent(seq, proof["prev_hash"], proof["event_hash"], text.decode(), body)
        prove_event(self.archive, seq, text, proof, roots)
        del self.problems[seq]

    def find_event(self, tenant: str, event_type: str, name: str, value: str) -> ChainedEvent | None:
        return self._by(tenant, event_type, lambda parsed: parsed["details"].get(name), name).get(value)

    def event(self, tenant: str, event_type: str, event_id: str) -> ChainedEvent | None:
        return self._by(tenant, event_type, lambda parsed: parsed.get("event_id"), "(event_id)").get(event_id)

    def _by(
        self, tenant: str, event_type: str, field: Callable[[dict[str, Any]], object], name: str
    ) -> dict[str, ChainedEvent]:
        """The oldest event of each value of ``field`` among the tenant's events of a type, looked up once: a walk
        asks for many."""
        key = (tenant, str(event_type), name)
        if key not in self._lookups:
            found: dict[str, ChainedEvent] = {}
            for _, event in sorted(self.events.items()):
                parsed = event.parsed
                if parsed.get("tenant") == tenant and parsed.get("event_type") == str(event_type):
                    value = field(parsed)
                    if isinstance(value, str):
                        found.setdefault(value, event)
            self._lookups[key] = found
        return self._lookups[key]

    def chained(self, event: ChainedEvent) -> str | None:
        return self.problems.get(event.seq)

    def upload(self, tenant: str, document_id: str) -> tuple[ArtifactStore, str] | None:
        if not cast(dict[str, Any], self.index.documents)["with_uploads"]:  # a version 2 index: it has them
            return None
        admitted = self.find_event(tenant, EventType.DOCUMENT_ADMITTED, "document_id", document_id)
        digest = admitted.parsed["subject_sha256"] if admitted else ""
        return self.archive, upload_path(tenant, digest if re.fullmatch(r"[0-9a-f]{64}", str(digest)) else "none")

    def derived_by(self) -> DerivedBy:
        named = cast(dict[str, Any], self.index.documents)["derived_by"]  # a version 2 index: it has them
        level = named["pades_level"]
        tsa = trust_root(self.archive, str(named["tsa_root_id"]), self.root_ids) if level != "B-B" else None
        return DerivedBy(trust_root(self.archive, str(named["trust_root_id"]), self.root_ids), level, tsa)


def check_documents(
    store: ArtifactStore, index: Index, checks: PackageChecks, key_ids: frozenset[str], root_ids: frozenset[str]
) -> list[dict[str, Any]]:
    """Adds one check per document event and one per walked artifact to ``checks``; returns the walks' reports."""
    section = index.documents
    if not section or not section.get("artifacts"):
        return []
    problem = section_problem(section, index.tenant) if TENANT_ID.fullmatch(index.tenant) else "has no tenant"
    if problem is not None:
        checks.checks.append(Check("documents", False, ReasonCode.PACKAGE_INVALID, f"the documents section {problem}"))
        return []
    try:
        keys = CheckpointKeys.of(store, key_ids, root_ids).keys
    except EvidenceError as error:
        if error.code in UNAVAILABLE_CODES:
            raise
        keys = {}  # reported by check_package's keyring check; no statement can verify
    source = PackageSource(store, index, keys, root_ids)
    for seq in section["events"]:
        checks.checks.append(run_check(f"document event {seq}", lambda: source.prove(seq, checks.roots)))
    reports = []
    for artifact in section["artifacts"]:
        report = None

        def walked() -> None:
            nonlocal report
            try:
                report = walk(source, artifact)
            except (KeyError, TypeError, ValueError, AttributeError):  # a tampered event or document
                raise EvidenceError(ReasonCode.LINEAGE_EVENT_INVALID, "a link's event or document is malformed")
            if not report["ok"]:
                raise EvidenceError(report["code"], f"{report['link']}: {report['message']}")

        checks.checks.append(run_check(f"lineage {artifact}", walked))
        if report is not None:
            reports.append(report)
    return reports
