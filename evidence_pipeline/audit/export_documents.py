"""What `evidence export` packs of a tenant's document jobs (the format is package_documents.py's): every output
of each job whose period is in the exported range, walked back to its upload by audit/lineage.py's walk over the
ledger (lineage_ledger.py's source), recording what the walk read. A walk that does not hold stops the export:
a package never carries evidence that its own verifier would refuse."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from evidence_pipeline.audit.lineage import DerivedBy, walk
from evidence_pipeline.audit.lineage_ledger import LedgerSource
from evidence_pipeline.document_formats import DERIVED_BY, SIGNATURE_CHECKS, STATEMENT
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import ChainedEvent, EventType
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.store import ArtifactStore, sha256_hex


@dataclass
class DocumentContents:
    """What the walks read: the package holds exactly this of the tenant's documents."""

    artifacts: list[str] = field(default_factory=list)  # where the walks start
    # seq -> the event as the ledger source returns it
    events: dict[int, ChainedEvent] = field(default_factory=dict)
    objects: dict[str, str] = field(default_factory=dict)  # archive key -> sha256 of the bytes the walk checked
    uploads: dict[str, tuple[ArtifactStore, str, str]] = field(default_factory=dict)  # id -> (store, key, sha256)
    derived_by: dict[str, Any] = field(default_factory=dict)


class _RecordingArchive:
    """The archive as the walk reads it, noting each object and the digest of the bytes it got."""

    def __init__(self, archive: ArtifactStore, objects: dict[str, str]):
        self.archive, self.objects = archive, objects

    def get(self, key: str) -> bytes:
        data = self.archive.get(key)
        self.objects[key] = sha256_hex(data)
        return data

    def exists(self, key: str) -> bool:
        return self.archive.exists(key)


class _Recording:
    """lineage_ledger.py's source, noting every event and upload the walk met."""

    def __init__(self, source: LedgerSource, contents: DocumentContents):
        self.source, self.contents = source, contents
        self.archive = _RecordingArchive(source.archive, contents.objects)
        self.statement_keys = source.statement_keys

    def _noted(self, event: ChainedEvent | None) -> ChainedEvent | None:
        if event is not None:
            self.contents.events[event.seq] = event
        return event

    def find_event(self, tenant: str, event_type: str, name: str, value: str) -> ChainedEvent | None:
        return self._noted(self.source.find_event(tenant, event_type, name, value))

    def event(self, tenant: str, event_type: str, event_id: str) -> ChainedEvent | None:
        return self._noted(self.source.event(tenant, event_type, event_id))

    def chained(self, event: ChainedEvent) -> str | None:
        return self.source.chained(event)

    def upload(self, tenant: str, document_id: str) -> tuple[ArtifactStore, str] | None:
        store, key = self.source.upload(tenant, document_id)
        admitted = cast(
            ChainedEvent,  # the walk found the upload's admission before it asks for the bytes
            self.source.find_event(tenant, EventType.DOCUMENT_ADMITTED, "document_id", document_id),
        )
        self.contents.uploads[document_id] = (store, key, admitted.parsed["subject_sha256"])
        return store, key

    def derived_by(self) -> DerivedBy:
        return self.source.derived_by()


def _starts_a_walk(key: str) -> bool:
    """A job output the walk starts from: not a statement, manifest, signed copy or a split's signature check
    record or ETSI report, which it reaches from there."""
    name = key.rsplit("/", 1)[-1]
    return (
        name != STATEMENT
        and not name.endswith((f".{STATEMENT}", ".manifest.json", f".{DERIVED_BY}"))
        and key.split("/")[2] != SIGNATURE_CHECKS
    )


def collect_documents(rt: Runtime, tenant: str, first: str | None, last: str | None) -> DocumentContents:
    """Walk every output of ``tenant``'s document jobs of the periods ``first``..``last``; what the walks read."""
    contents = DocumentContents()
    source = _Recording(LedgerSource(rt), contents)
    starts: dict[str, None] = {}  # in ledger order, once each (jobs of the same content share derivatives)
    for event, _, _ in rt.ledger.stored_events(EventType.DOCUMENT_PUBLISHED, tenant):
        details = event.body["details"]
        period = details["prefix"].split("/")[2]
        if (first or period) <= period <= (last or period):
            starts.update((a["key"], None) for a in details["artifacts"] if _starts_a_walk(a["key"]))
    for artifact in starts:
        report = walk(source, artifact)
        if not report["ok"]:
            raise EvidenceError(
                ReasonCode(report["code"]),  # type: ignore[call-arg]  # an Enum lookup by value
                f"{artifact} cannot be exported: its lineage does not hold ({report['link']}: {report['message']})",
            )
    contents.artifacts = list(starts)
    level = rt.settings.pades_level
    contents.derived_by = {
        "pades_level": level,
        "trust_root_id": rt.keyring.root_id,
        "tsa_root_id": rt.keyring.tsa_root_id if level != "B-B" else None,
    }
    return contents
