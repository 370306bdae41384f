"""Admitted documents and the events that name documents and their derivatives (`document.derived`,
`signature.checked`, `document.published`): admission with its byte quota, lookups by id, and the chain neighbours
that lineage checks an event against."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from sqlalchemy import Connection, bindparam, select

from evidence_pipeline.canonical import canonical, sha256_text
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger.admission import Clock, serialize_admissions
from evidence_pipeline.ledger.db import classified_errors
from evidence_pipeline.ledger.ledger import Ledger, event_body
from evidence_pipeline.ledger.rows import Document
from evidence_pipeline.models import ChainedEvent, EventType, TenantMonth, current_month


class DocumentRecords:
    def __init__(self, ledger: Ledger):
        self.ledger = ledger
        self.documents = ledger.documents
        self._document_query = select(self.documents).where(
            self.documents.c.document_id == bindparam("document_id"), self.documents.c.tenant == bindparam("tenant")
        )
        storage = ledger.tenant_storage
        # the running total of the tenant's document sizes (migration 0015): one row, however long its history
        self._stored_query = select(storage.c.stored_bytes).where(storage.c.tenant == bindparam("tenant"))
        self._first_stored = storage.insert()
        self._add_stored = (
            storage.update()
            .where(storage.c.tenant == bindparam("for_tenant"))
            .values(stored_bytes=storage.c.stored_bytes + bindparam("size"))
        )

    def admit_document(
        self,
        tenant: str,
        sha256: str,
        *,
        size: int,
        media_type: str,
        store_key: str,
        actor: str,
        clock: Clock,
        max_bytes: int,
    ) -> tuple[Document, bool]:
        """Record an admitted document and its `document.admitted` event (with the request's ``admission_ms`` so
        far); the same bytes again return the first record. Returns (row, created). A new document that takes the
        tenant past ``max_bytes`` stored is REQUEST_EXCEEDS_QUOTA, checked in the transaction that admits it
        (admissions that check a quota commit one after another, so each sees the last: serialize_admissions)."""
        document_id = "doc_" + sha256_text(f"{tenant}/{sha256}")[:40]
        admission = _Admission(tenant, document_id, sha256, size, media_type, store_key, actor, clock, max_bytes)
        return self.ledger._transact_together(admission, self._admit_all)

    def _admit_all(self, conn: Connection, admissions: list[_Admission]) -> list[tuple[Document, bool]]:
        """Admit a turn's documents (ledger._transact_together) in a few statements for all of them: on PostgreSQL
        each statement is a round trip made under the admissions' lock, and six per upload serialized a burst."""
        docs = self.documents.c
        found = conn.execute(
            select(self.documents).where(
                docs.tenant.in_({a.tenant for a in admissions}),
                docs.document_id.in_({a.document_id for a in admissions}),
            )
        )
        records = {(row.tenant, row.document_id): (Document.of(row), False) for row in found}
        new: dict[tuple[str, str], _Admission] = {}  # the first admission of each new document in the turn
        for a in admissions:
            if a.key not in records:
                new.setdefault(a.key, a)
        if new:
            serialize_admissions(conn)
            records |= self._insert_new(conn, list(new.values()))
        # created only for the first upload of a new document: the same bytes again in this turn get its row
        return [(records[a.key][0], records[a.key][1] and new[a.key] is a) for a in admissions]

    def _insert_new(
        self, conn: Connection, admissions: list[_Admission]
    ) -> dict[tuple[str, str], tuple[Document, bool]]:
        """The new documents' rows and events, one statement each, and one per tenant for its running total;
        REQUEST_EXCEEDS_QUOTA when a document takes its tenant past its quota."""
        storage = self.ledger.tenant_storage.c
        stored = dict(
            conn.execute(
                select(storage.tenant, storage.stored_bytes).where(storage.tenant.in_({a.tenant for a in admissions}))
            ).all()
        )  # absent: no document yet
        totals = dict(stored)
        for a in admissions:
            totals[a.tenant] = totals.get(a.tenant, 0) + a.size
            if totals[a.tenant] > a.max_bytes:
                raise stored_bytes_exceeded(a.max_bytes)
        now = time.time()
        events = self.ledger._append_many(
            conn,
            [
                (
                    TenantMonth(a.tenant, current_month(now)),
                    EventType.DOCUMENT_ADMITTED,
                    a.sha256,
                    a.actor,
                    {"document_id": a.document_id, "bytes": a.size, "media_type": a.media_type, **a.clock.details()},
                )
                for a in admissions
            ],
        )
        rows = [
            Document(a.document_id, a.tenant, a.sha256, a.size, a.media_type, a.store_key, now, event.seq)
            for a, event in zip(admissions, events)
        ]
        conn.execute(self.documents.insert(), [asdict(row) for row in rows])
        for tenant, total in totals.items():
            if tenant in stored:
                conn.execute(self._add_stored, {"for_tenant": tenant, "size": total - stored[tenant]})
            else:
                conn.execute(self._first_stored, {"tenant": tenant, "stored_bytes": total})
        return {a.key: (row, True) for a, row in zip(admissions, rows)}

    def document(self, tenant: str, document_id: str) -> Document | None:
        """``tenant``'s document, or None: another tenant's document does not exist for this one."""
        with classified_errors(), self.ledger.reading() as conn:
            return self._document(conn, tenant, document_id)

    def _document(self, conn: Connection, tenant: str, document_id: str) -> Document | None:
        row = conn.execute(self._document_query, {"document_id": document_id, "tenant": tenant}).first()
        return None if row is None else Document.of(row)

    def stored_bytes(self, tenant: str) -> int:
        with classified_errors(), self.ledger.reading() as conn:
            return self._stored(conn, tenant) or 0

    def _stored(self, conn: Connection, tenant: str) -> int | None:
        return conn.execute(self._stored_query, {"tenant": tenant}).scalar()

    def existing_documents(self, tenant: str, document_ids: set[str]) -> set[str]:
        """Which of ``document_ids`` are ``tenant``'s documents."""
        docs = self.documents.c
        with classified_errors(), self.ledger.engine.connect() as conn:
            return set(
                conn.execute(
                    select(docs.document_id).where(docs.tenant == tenant, docs.document_id.in_(sorted(document_ids)))
                ).scalars()
            )

    def existing_inputs(self, tenant: str, ids: set[str]) -> set[str]:
        """Which of ``ids`` are ``tenant``'s documents or committed derivatives (artifact ids)."""
        documents = self.existing_documents(tenant, {i for i in ids if i.startswith("doc_")})
        return documents | {
            i
            for i in ids - documents
            if self.find_event(tenant, EventType.DOCUMENT_DERIVED, "artifact_id", i) is not None
        }

    def find_event(
        self, tenant: str, event_type: str, name: str, value: str, *, newest: bool = False
    ) -> ChainedEvent | None:
        """The oldest (``newest``: the latest) of ``tenant``'s events of ``event_type`` whose details[``name``] is
        ``value``, with its place in the chain; None when there is none."""
        with classified_errors(), self.ledger.engine.connect() as conn:
            return find_event_in(conn, self.ledger, tenant, event_type, name=name, value=value, newest=newest)

    def event(self, tenant: str, event_type: str, event_id: str) -> ChainedEvent | None:
        """``tenant``'s event of ``event_type`` with ``event_id``, as find_event returns it; None when there is none
        (another tenant's event does not exist for this one)."""
        events = self.ledger.audit_events.c
        query = select(events.seq, events.prev_hash, events.event_hash, events.body).where(
            events.event_id == event_id, events.tenant == tenant, events.event_type == str(event_type)
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            row = conn.execute(query).first()
        if row is None:
            return None
        return ChainedEvent(row.seq, row.prev_hash, row.event_hash, row.body, event_body(row.body))

    def neighbour_hashes(self, seq: int) -> tuple[str | None, str | None]:
        """(the event_hash of the event before position ``seq``, the prev_hash of the event after it); None where
        there is none."""
        events = self.ledger.audit_events.c
        before = select(events.event_hash).where(events.seq < seq).order_by(events.seq.desc()).limit(1)
        after = select(events.prev_hash).where(events.seq > seq).order_by(events.seq).limit(1)
        with classified_errors(), self.ledger.engine.connect() as conn:
            return conn.execute(before).scalar(), conn.execute(after).scalar()


def find_event_in(
    conn: Connection, ledger: Ledger, tenant: str, event_type: str, *, name: str, value: str, newest: bool = False
) -> ChainedEvent | None:
    """DocumentRecords.find_event on ``conn``: inside a caller's transaction, which may have appended it."""
    events = ledger.audit_events.c
    # Bodies are canonical JSON, so the pair appears verbatim: the database narrows, the parse decides.
    pair = canonical({name: value})[1:-1]
    query = (
        select(events.seq, events.prev_hash, events.event_hash, events.body)
        .where(events.tenant == tenant, events.event_type == str(event_type))
        .where(events.body.contains(pair, autoescape=True))
        .order_by(events.seq.desc() if newest else events.seq)
    )
    for row in conn.execute(query):
        body = event_body(row.body)
        if body["details"].get(name) == value:
            return ChainedEvent(row.seq, row.prev_hash, row.event_hash, row.body, body)
    return None


@dataclass(frozen=True)
class _Admission:
    """One upload to admit, as admit_document received it."""

    tenant: str
    document_id: str
    sha256: str
    size: int
    media_type: str
    store_key: str
    actor: str
    clock: Clock
    max_bytes: int

    @property
    def key(self) -> tuple[str, str]:
        return self.tenant, self.document_id


def stored_bytes_exceeded(quota: int) -> EvidenceError:
    """A document past its tenant's stored-bytes quota. Documents are kept (only offboarding erases them), so a
    tenant's stored bytes never go down: the upload will never fit, and "try again later" would loop forever."""
    return EvidenceError(
        ReasonCode.REQUEST_EXCEEDS_QUOTA,
        f"this document would take the tenant past its quota of "
        f"{quota} stored document bytes, and stored documents are kept: it can never fit",
    )
