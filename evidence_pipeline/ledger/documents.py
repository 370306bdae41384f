"""The ledger's side of intake: API tokens, admitted documents, document and evidence jobs, batches.

A document job is an `evidence_jobs` row with fidelity ``document`` (so it moves through the same compare-and-swap
states under the same fenced leases, retry budget, dead letters and `evidence replay` as a tenant-month) plus an
`evidence_document_jobs` row. Its `source_sha256` is the request digest and its `period` the month it was accepted
in. Every write here commits its audit event in the same transaction.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import Connection, MetaData, and_, bindparam, func, or_, select, text

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger import jobs as states
from evidence_pipeline.ledger.db import LostRace, classified_errors
from evidence_pipeline.ledger.jobs import DOCUMENT, Lease, document_job_id
from evidence_pipeline.ledger.ledger import Ledger, canonical, event_body
from evidence_pipeline.models import EventType, TenantMonth

WORKER_VERSION = "documents/1"  # recorded as the job's renderer_version: what processes document jobs
TOKEN_PREFIX = "evt_"
EVIDENCE = "evidence"  # the operation of an evidence job: a tenant-month's bundle, made by a Dagster run


@dataclass(frozen=True)
class Clock:
    """When an intake request began (time.perf_counter()), or None outside a request: admission events carry
    ``admission_ms``, the request's time until its ledger commit, as a clock of its own (`evidence stats`).
    ``period``: the month a job counts in, when not the one it is accepted in (only `evidence demo` sets it, to
    file its jobs under the last complete month, whose report it then renders)."""

    started: float | None
    period: str | None = None

    def details(self) -> dict:
        return {} if self.started is None else {"admission_ms": round((time.perf_counter() - self.started) * 1000, 3)}


@dataclass(frozen=True)
class JobLimits:
    max_outstanding: int  # a tenant's accepted or running jobs, its open batches' undispatched jobs included
    max_queue_age_seconds: float  # the tenant's oldest accepted, never started job
    max_queued: int  # every tenant's outstanding jobs together: true overload


@dataclass(frozen=True)
class StageChange:
    """A staged job's move from ``prior`` to ``stage``, with the facts its `document.stage` event records."""

    prior: str
    stage: str
    details: dict


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def current_month(now: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if now is None else now, timezone.utc).strftime("%Y-%m")


class DocumentLedger:
    def __init__(self, ledger: Ledger):
        self.ledger = ledger
        tables = MetaData()
        with classified_errors():
            tables.reflect(ledger.engine, only=("evidence_api_tokens", "evidence_documents", "evidence_batches"))
        self.batches = tables.tables["evidence_batches"]
        self.tokens = tables.tables["evidence_api_tokens"]
        self.documents = tables.tables["evidence_documents"]
        self.document_jobs = ledger.document_jobs
        # Run for every job: built once, with parameters (see JobTransitions._job_query).
        docs = self.document_jobs.c
        self._started_update = self.document_jobs.update().where(
            docs.job_id == bindparam("started_job_id"), docs.started_at.is_(None))
        self._finished_update = self.document_jobs.update().where(docs.job_id == bindparam("finished_job_id"))
        self._document_query = select(self.documents).where(
            self.documents.c.document_id == bindparam("document_id"), self.documents.c.tenant == bindparam("tenant"))

    # --- tokens -----------------------------------------------------------------------------------------------

    def issue_token(self, tenant: str, actor: str) -> tuple[str, str]:
        """A new API token for ``tenant``: (token id, token). Only the token's sha256 is stored."""
        token_id = "tok_" + secrets.token_hex(12)
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)  # 256 bits of randomness
        now = time.time()

        def issue(conn: Connection) -> None:
            if self._offboarding(conn, tenant) is not None:
                raise EvidenceError(ReasonCode.TENANT_OFFBOARDED, f"tenant {tenant} was offboarded")
            conn.execute(
                self.tokens.insert().values(
                    token_id=token_id, tenant=tenant, token_sha256=sha256_text(token), created_at=now
                )
            )
            self.ledger._append(
                conn,
                TenantMonth(tenant, current_month(now)),
                EventType.TOKEN_ISSUED,
                sha256_text(token_id),
                actor,
                {"token_id": token_id},
            )

        self.ledger._transact(issue)
        return token_id, token

    def revoke_token(self, token_id: str, actor: str) -> str:
        """Revoke a token (idempotent); returns its tenant."""

        def revoke(conn: Connection) -> str:
            row = conn.execute(select(self.tokens).where(self.tokens.c.token_id == token_id)).first()
            if row is None:
                raise EvidenceError(ReasonCode.TOKEN_NOT_FOUND, "no such token id")
            if row.revoked_at is None:
                self._revoke(conn, row.tenant, token_id, actor, time.time())
            return row.tenant

        return self.ledger._transact(revoke)

    def _revoke(self, conn: Connection, tenant: str, token_id: str, actor: str, now: float) -> None:
        conn.execute(self.tokens.update().where(self.tokens.c.token_id == token_id).values(revoked_at=now))
        self.ledger._append(conn, TenantMonth(tenant, current_month(now)), EventType.TOKEN_REVOKED,
                            sha256_text(token_id), actor, {"token_id": token_id})

    # --- offboarding ------------------------------------------------------------------------------------------

    def record_offboarding(self, tenant: str, actor: str, details: dict) -> tuple[dict, bool]:
        """Revoke the tenant's live tokens, append `tenant.offboarded` and mark the tenant offboarded in the registry,
        in one transaction. Once per tenant: an offboarded tenant gets its first event's body back, and False."""

        def offboard(conn: Connection) -> tuple[dict, bool]:
            first = self._offboarding(conn, tenant)
            if first is not None:
                return first, False
            now = time.time()
            live = conn.execute(
                select(self.tokens.c.token_id).where(self.tokens.c.tenant == tenant, self.tokens.c.revoked_at.is_(None))
            ).scalars().all()
            for token_id in live:
                self._revoke(conn, tenant, token_id, actor, now)
            event = self.ledger._append(conn, TenantMonth(tenant, current_month(now)), EventType.TENANT_OFFBOARDED,
                                        sha256_text(tenant), actor, details | {"tokens_revoked": len(live)})
            registry = self.ledger.tenants
            conn.execute(registry.update().where(registry.c.tenant == tenant).values(offboarded_seq=event.seq))
            return event.body, True

        return self.ledger._transact(offboard)

    def _offboarding(self, conn: Connection, tenant: str) -> dict | None:
        """The body of the tenant's `tenant.offboarded` event, or None."""
        events = self.ledger.audit_events.c
        body = conn.execute(
            select(events.body).where(events.tenant == tenant, events.event_type == EventType.TENANT_OFFBOARDED)
        ).scalar()
        return None if body is None else event_body(body)

    def tenant_of_token(self, token: str) -> str | None:
        """The tenant a live token belongs to, or None (unknown or revoked)."""
        tokens = self.tokens.c
        query = select(tokens.tenant).where(tokens.token_sha256 == sha256_text(token), tokens.revoked_at.is_(None))
        with classified_errors(), self.ledger.engine.connect() as conn:
            return conn.execute(query).scalar()

    # --- documents --------------------------------------------------------------------------------------------

    def admit_document(
        self, tenant: str, sha256: str, size: int, media_type: str, store_key: str, actor: str, clock: Clock,
        max_bytes: int,
    ) -> tuple[dict, bool]:
        """Record an admitted document and its `document.admitted` event (with the request's ``admission_ms`` so
        far); the same bytes again return the first record. Returns (row, created). A new document that takes the
        tenant past ``max_bytes`` stored is TENANT_QUOTA_EXCEEDED, checked in the transaction that admits it (admissions
        that check a quota commit one after another, so each sees the last: _serialize_admissions)."""
        document_id = "doc_" + sha256_text(f"{tenant}/{sha256}")[:40]
        docs = self.documents.c

        def admit(conn: Connection) -> tuple[dict, bool]:
            existing = self._document(conn, tenant, document_id)
            if existing is not None:
                return existing, False
            _serialize_admissions(conn)
            stored = conn.execute(select(func.coalesce(func.sum(docs.size), 0)).where(docs.tenant == tenant)).scalar()
            if stored + size > max_bytes:
                raise EvidenceError(ReasonCode.TENANT_QUOTA_EXCEEDED, f"at most {max_bytes} stored document bytes")
            now = time.time()
            event = self.ledger._append(
                conn,
                TenantMonth(tenant, current_month(now)),
                EventType.DOCUMENT_ADMITTED,
                sha256,
                actor,
                {"document_id": document_id, "bytes": size, "media_type": media_type, **clock.details()},
            )
            conn.execute(
                self.documents.insert().values(
                    document_id=document_id,
                    tenant=tenant,
                    sha256=sha256,
                    size=size,
                    media_type=media_type,
                    store_key=store_key,
                    created_at=now,
                    event_seq=event.seq,
                )
            )
            return self._document(conn, tenant, document_id), True

        return self.ledger._transact_together(admit)

    def document(self, tenant: str, document_id: str) -> dict | None:
        """``tenant``'s document, or None: another tenant's document does not exist for this one."""
        with classified_errors(), self.ledger.engine.connect() as conn:
            return self._document(conn, tenant, document_id)

    def _document(self, conn: Connection, tenant: str, document_id: str) -> dict | None:
        row = conn.execute(self._document_query, {"document_id": document_id, "tenant": tenant}).first()
        return None if row is None else dict(row._mapping)

    # --- jobs -------------------------------------------------------------------------------------------------

    def submit_job(
        self,
        tenant: str,
        idempotency_key: str,
        request_sha256: str,
        operation: str,
        request: dict,
        policy_version: str,
        actor: str,
        limits: JobLimits | None,
        clock: Clock,
    ) -> tuple[dict, bool]:
        """Accept a job once per (tenant, batch, idempotency key). Returns (job, created). The same key with another
        request digest is IDEMPOTENCY_CONFLICT, recorded in the ledger with both digests and nothing else. A new
        key is refused while the queue is older than its objective (INTAKE_BACKPRESSURE) or the tenant has its
        quota of outstanding jobs (TENANT_QUOTA_EXCEEDED); a key already accepted is always answered. A batch's
        children (``limits`` None) were admitted with their batch."""
        job, created = self.ledger._transact(
            lambda conn: self._submit(
                conn,
                tenant,
                idempotency_key,
                request_sha256,
                operation,
                request,
                policy_version,
                actor,
                limits,
                "",
                clock,
            )
        )
        if created is None:
            raise EvidenceError(
                ReasonCode.IDEMPOTENCY_CONFLICT, "this Idempotency-Key was used for a different request"
            )
        return job, created

    def _submit(
        self,
        conn: Connection,
        tenant: str,
        idempotency_key: str,
        request_sha256: str,
        operation: str,
        request: dict,
        policy_version: str,
        actor: str,
        limits: JobLimits | None,
        batch_id: str,
        clock: Clock,
    ) -> tuple[dict, bool | None]:
        """submit_job inside a transaction: (job, created), created None for an idempotency conflict."""
        job_id = document_job_id(tenant, idempotency_key, batch_id)
        existing = self._job(conn, tenant, job_id)
        now = time.time()
        tenant_month = TenantMonth(tenant, clock.period or current_month(now))
        if existing is not None:
            if existing["request_sha256"] == request_sha256:
                return existing, False
            self.ledger._append(
                conn,
                tenant_month,
                EventType.JOB_IDEMPOTENCY_CONFLICT,
                request_sha256,
                actor,
                {
                    "job_id": job_id,
                    "request_sha256": request_sha256,
                    "accepted_request_sha256": existing["request_sha256"],
                },
            )
            return existing, None
        if limits is not None:
            self._check_load(conn, tenant, now, limits)
        conn.execute(
            self.ledger.jobs.insert().values(
                job_id=job_id,
                tenant=tenant,
                period=tenant_month.period,
                source_sha256=request_sha256,
                renderer_version=WORKER_VERSION,
                policy_version=policy_version,
                fidelity=DOCUMENT,
                state=states.ACCEPTED,
                attempts=0,
                lease_token=0,
                budget_started_at=now,
                created_at=now,
                updated_at=now,
            )
        )
        conn.execute(
            self.document_jobs.insert().values(
                job_id=job_id,
                tenant=tenant,
                batch_id=batch_id,
                idempotency_key=idempotency_key,
                request_sha256=request_sha256,
                operation=operation,
                request=canonical(request),
                accepted_at=now,
            )
        )
        self.ledger._append(
            conn,
            tenant_month,
            EventType.JOB_ACCEPTED,
            request_sha256,
            actor,
            {"job_id": job_id, "fidelity": DOCUMENT, "operation": operation, **clock.details()}
            | ({"batch_id": batch_id} if batch_id else {}),
        )
        return self._job(conn, tenant, job_id), True

    def _check_load(self, conn: Connection, tenant: str, now: float, limits: JobLimits, adding: int = 1) -> None:
        """Refuse ``adding`` new jobs of ``tenant``: backpressure on its own queue's age (another tenant's backlog
        never refuses this one) or on every tenant's outstanding jobs together, then its quota."""
        _serialize_admissions(conn)
        oldest = conn.execute(self._oldest_unstarted().where(self.document_jobs.c.tenant == tenant)).scalar()
        if oldest is not None and now - oldest > limits.max_queue_age_seconds:
            raise EvidenceError(ReasonCode.INTAKE_BACKPRESSURE, "your queue is behind its objective; try again later")
        if self._outstanding(conn) + adding > limits.max_queued:
            raise EvidenceError(ReasonCode.INTAKE_BACKPRESSURE, "the service is overloaded; try again later")
        if self._outstanding(conn, tenant) + adding > limits.max_outstanding:
            raise EvidenceError(ReasonCode.TENANT_QUOTA_EXCEEDED, f"at most {limits.max_outstanding} outstanding jobs")

    def _outstanding(self, conn: Connection, tenant: str | None = None) -> int:
        """Accepted or running jobs, and the jobs of open batches not dispatched yet (they are accepted work),
        of ``tenant`` or of all."""
        docs, jobs, b = self.document_jobs.c, self.ledger.jobs.c, self.batches.c
        created = (select(func.count()).select_from(self.document_jobs)
                   .join(self.ledger.jobs, jobs.job_id == docs.job_id)
                   .where(jobs.state.in_((states.ACCEPTED, states.RUNNING))))
        undispatched = select(func.coalesce(func.sum(b.jobs - b.dispatched), 0)).where(b.state == "open")
        if tenant is not None:
            created, undispatched = created.where(docs.tenant == tenant), undispatched.where(b.tenant == tenant)
        return conn.execute(created).scalar() + conn.execute(undispatched).scalar()

    def check_batch_load(self, tenant: str, jobs: int, limits: JobLimits) -> None:
        """The load check of a new batch of ``jobs``, before its specs are checked one by one (thousands cost
        seconds). A batch of the same size on record may be this one repeated, which counts itself: create_batch's
        exact check answers that one."""
        b = self.batches.c
        with classified_errors(), self.ledger.engine.connect() as conn:
            if conn.execute(select(b.batch_id).where(b.tenant == tenant, b.jobs == jobs).limit(1)).first() is None:
                self._check_load(conn, tenant, time.time(), limits, adding=jobs)

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
        return documents | {i for i in ids - documents if self.find_event(tenant, EventType.DOCUMENT_DERIVED,
                                                                          "artifact_id", i) is not None}

    def find_event(self, tenant: str, event_type: str, name: str, value: str) -> dict | None:
        """The oldest of ``tenant``'s events of ``event_type`` whose details[``name``] is ``value``: its row (seq,
        prev_hash, event_hash, the stored body text) and ``details``; None when there is none."""
        with classified_errors(), self.ledger.engine.connect() as conn:
            return self._find_event(conn, tenant, event_type, name, value)

    def _find_event(self, conn: Connection, tenant: str, event_type: str, name: str, value: str) -> dict | None:
        events = self.ledger.audit_events.c
        # Bodies are canonical JSON, so the pair appears verbatim: the database narrows, the parse decides.
        pair = canonical({name: value})[1:-1]
        query = (
            select(events.seq, events.prev_hash, events.event_hash, events.body)
            .where(events.tenant == tenant, events.event_type == str(event_type))
            .where(events.body.contains(pair, autoescape=True))
            .order_by(events.seq)
        )
        for row in conn.execute(query):
            body = event_body(row.body)
            if body["details"].get(name) == value:
                return dict(row._mapping) | {"parsed": body}
        return None

    def neighbour_hashes(self, seq: int) -> tuple[str | None, str | None]:
        """(the event_hash of the event before position ``seq``, the prev_hash of the event after it); None where
        there is none."""
        events = self.ledger.audit_events.c
        before = select(events.event_hash).where(events.seq < seq).order_by(events.seq.desc()).limit(1)
        after = select(events.prev_hash).where(events.seq > seq).order_by(events.seq).limit(1)
        with classified_errors(), self.ledger.engine.connect() as conn:
            return conn.execute(before).scalar(), conn.execute(after).scalar()

    def latest_review(self, tenant: str, input_id: str) -> dict | None:
        """``tenant``'s most recently finished contract review of exactly ``input_id`` whose outputs committed."""
        docs = self.document_jobs.c
        query = (
            select(docs.job_id)
            .where(
                docs.tenant == tenant,
                docs.operation == "contract-review",
                docs.outputs.is_not(None),
                docs.request.contains(json.dumps(input_id), autoescape=True),
            )
            .order_by(docs.finished_at.desc())
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            for job_id in conn.execute(query).scalars():
                job = self._job(conn, tenant, job_id)
                if job["request"]["inputs"] == [input_id]:
                    return job
        return None

    def record_once(self, job: dict, lease: Lease, event_type: str, subject_sha256: str, name: str,
                    details: dict, actor: str) -> None:
        """Append the job's tenant's event of ``event_type`` identified by details[``name``], fenced by ``lease``,
        unless one is already committed."""

        def record(conn: Connection) -> None:
            self._fence(conn, lease)
            if self._find_event(conn, job["tenant"], event_type, name, details[name]) is None:
                self.ledger._append(conn, TenantMonth(job["tenant"], job["period"]), event_type, subject_sha256,
                                    actor, details)

        self.ledger._transact(record)

    # --- batches ----------------------------------------------------------------------------------------------

    def create_batch(
        self,
        tenant: str,
        batch_id: str,
        manifest_sha256: str,
        store_key: str,
        jobs: int,
        actor: str,
        limits: JobLimits,
        clock: Clock,
    ) -> tuple[dict, bool]:
        """Record a batch (its manifest is already stored); no child job is created here. The same manifest again
        returns the first record. Returns (row, created)."""

        def create(conn: Connection) -> tuple[dict, bool]:
            existing = self._batch(conn, tenant, batch_id)
            if existing is not None:
                return existing, False
            now = time.time()
            self._check_load(conn, tenant, now, limits, adding=jobs)
            conn.execute(
                self.batches.insert().values(
                    batch_id=batch_id,
                    tenant=tenant,
                    manifest_sha256=manifest_sha256,
                    store_key=store_key,
                    jobs=jobs,
                    dispatched=0,
                    state="open",
                    created_at=now,
                    updated_at=now,
                )
            )
            self.ledger._append(
                conn,
                TenantMonth(tenant, current_month(now)),
                EventType.BATCH_ACCEPTED,
                manifest_sha256,
                actor,
                {"batch_id": batch_id, "jobs": jobs, **clock.details()},
            )
            return self._batch(conn, tenant, batch_id), True

        return self.ledger._transact(create)

    def batch(self, tenant: str, batch_id: str) -> dict | None:
        with classified_errors(), self.ledger.engine.connect() as conn:
            return self._batch(conn, tenant, batch_id)

    def _batch(self, conn: Connection, tenant: str, batch_id: str) -> dict | None:
        return _owned_row(conn, self.batches, self.batches.c.batch_id == batch_id, tenant)

    def open_batches(self) -> list[dict]:
        """Batches with children still to create, oldest first."""
        b = self.batches.c
        with classified_errors(), self.ledger.engine.connect() as conn:
            rows = conn.execute(select(self.batches).where(b.state == "open").order_by(b.created_at, b.batch_id))
            return [dict(row._mapping) for row in rows]

    def dispatch_batch_page(
        self, batch: dict, children: list[tuple[str, str, str, dict]], policy_version: str, actor: str
    ) -> bool:
        """Create the next children of a batch, (idempotency key, request digest, operation, request) each, and
        advance its cursor, in one transaction: False when the batch moved meanwhile (cancelled, or another
        dispatcher advanced it), and then nothing is created."""
        b = self.batches.c
        dispatched = batch["dispatched"] + len(children)

        def dispatch(conn: Connection) -> bool:
            advanced = conn.execute(
                self.batches.update()
                .where(
                    b.batch_id == batch["batch_id"],
                    b.state == "open",
                    b.dispatched == batch["dispatched"],
                )
                .values(
                    dispatched=dispatched,
                    state="dispatched" if dispatched >= batch["jobs"] else "open",
                    updated_at=time.time(),
                )
            ).rowcount
            if not advanced:
                return False
            for key, request_sha256, operation, request in children:
                self._submit(
                    conn,
                    batch["tenant"],
                    key,
                    request_sha256,
                    operation,
                    request,
                    policy_version,
                    actor,
                    None,
                    batch["batch_id"],
                    Clock(None),
                )
            return True

        return self.ledger._transact(dispatch)

    def batch_counts(self, batch_id: str) -> dict[str, int]:
        """Child jobs of a batch by state."""
        docs, jobs = self.document_jobs.c, self.ledger.jobs.c
        query = (
            select(jobs.state, func.count())
            .join(self.document_jobs, jobs.job_id == docs.job_id)
            .where(docs.batch_id == batch_id)
            .group_by(jobs.state)
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            return {state: count for state, count in conn.execute(query)}

    def stop_batch(self, tenant: str, batch_id: str, actor: str) -> dict | None:
        """Stop dispatching a batch (idempotent); returns the batch as stopped, or None if it is not the tenant's."""

        def stop(conn: Connection) -> dict | None:
            batch = self._batch(conn, tenant, batch_id)
            if batch is None or batch["state"] == "cancelled":
                return batch
            b = self.batches.c
            stopped = conn.execute(
                self.batches.update()
                .where(
                    b.batch_id == batch_id,
                    b.state == batch["state"],
                    b.dispatched == batch["dispatched"],
                )
                .values(state="cancelled", updated_at=time.time())
            ).rowcount
            if not stopped:
                raise LostRace()  # a dispatcher advanced it meanwhile: look again
            self.ledger._append(
                conn,
                TenantMonth(tenant, current_month()),
                EventType.BATCH_CANCELLED,
                batch["manifest_sha256"],
                actor,
                {"batch_id": batch_id, "undispatched": batch["jobs"] - batch["dispatched"]},
            )
            return self._batch(conn, tenant, batch_id)

        return self.ledger._transact(stop)

    def cancelled_children(self, batch_id: str) -> int:
        docs, jobs = self.document_jobs.c, self.ledger.jobs.c
        query = (
            select(func.count())
            .select_from(self.document_jobs)
            .join(self.ledger.jobs, jobs.job_id == docs.job_id)
            .where(docs.batch_id == batch_id, jobs.last_reason == ReasonCode.JOB_CANCELLED)
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            return conn.execute(query).scalar()

    def batch_children_in(self, batch_id: str, state: str) -> list[str]:
        docs, jobs = self.document_jobs.c, self.ledger.jobs.c
        query = (
            select(docs.job_id)
            .join(self.ledger.jobs, jobs.job_id == docs.job_id)
            .where(docs.batch_id == batch_id, jobs.state == state)
            .order_by(docs.accepted_at)
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            return list(conn.execute(query).scalars())

    def oldest_unstarted_age(self) -> float | None:
        """Seconds since the oldest accepted, never started document job was accepted (the queue-age objective)."""
        with classified_errors(), self.ledger.engine.connect() as conn:
            oldest = conn.execute(self._oldest_unstarted()).scalar()
        return None if oldest is None else time.time() - oldest

    def _oldest_unstarted(self):
        docs, jobs = self.document_jobs.c, self.ledger.jobs.c
        return (
            select(func.min(docs.accepted_at))
            .join(self.ledger.jobs, jobs.job_id == docs.job_id)
            .where(jobs.state == states.ACCEPTED, docs.started_at.is_(None))
        )

    def ping(self) -> None:
        """Does the ledger database take writes? A write transaction that changes no row: it takes the writers'
        lock (so it is bounded by that lock's wait) and fails on a read-only or unwritable database."""
        with classified_errors(), self.ledger.writing(durable=False) as conn:
            conn.execute(self.tokens.update().where(self.tokens.c.token_id == "").values(revoked_at=None))

    def stored_bytes(self, tenant: str) -> int:
        docs = self.documents.c
        with classified_errors(), self.ledger.engine.connect() as conn:
            return conn.execute(select(func.coalesce(func.sum(docs.size), 0)).where(docs.tenant == tenant)).scalar()

    def job(self, tenant: str, job_id: str) -> dict | None:
        """``tenant``'s document job with its state, or None."""
        with classified_errors(), self.ledger.engine.connect() as conn:
            return self._job(conn, tenant, job_id)

    def _job(self, conn: Connection, tenant: str, job_id: str) -> dict | None:
        docs, jobs = self.document_jobs.c, self.ledger.jobs.c
        query = (
            select(
                self.document_jobs,
                jobs.state,
                jobs.attempts,
                jobs.last_reason,
                jobs.last_message,
                jobs.period,
                jobs.lease_token,
                jobs.policy_version,
                jobs.next_attempt_at,
            )
            .join(self.ledger.jobs, jobs.job_id == docs.job_id)
            .where(docs.job_id == job_id, docs.tenant == tenant)
        )
        row = conn.execute(query).first()
        if row is None:
            return None
        job = dict(row._mapping)
        job["request"] = json.loads(job["request"])
        job["outputs"] = json.loads(job["outputs"]) if job["outputs"] else None
        return job

    # --- dispatch and work ------------------------------------------------------------------------------------

    def assign_pages(self, page_size: int) -> None:
        """Put accepted, unpaged jobs into pages of at most ``page_size`` jobs of one tenant each, oldest first."""
        docs, jobs = self.document_jobs.c, self.ledger.jobs.c

        def assign(conn: Connection) -> None:
            rows = conn.execute(
                select(docs.job_id, docs.tenant)
                .join(self.ledger.jobs, jobs.job_id == docs.job_id)
                .where(jobs.state == states.ACCEPTED, docs.page_id.is_(None), docs.operation != EVIDENCE)
                .order_by(docs.accepted_at)
            ).all()
            by_tenant: dict[str, list[str]] = defaultdict(list)
            for row in rows:
                by_tenant[row.tenant].append(row.job_id)
            for job_ids in by_tenant.values():
                for start in range(0, len(job_ids), page_size):
                    page = job_ids[start : start + page_size]
                    page_id = sha256_text(canonical(sorted(page)))
                    conn.execute(
                        self.document_jobs.update()
                        .where(docs.job_id.in_(page), docs.page_id.is_(None))
                        .values(page_id=page_id)
                    )

        self.ledger._transact(assign)

    def open_pages(self) -> list[tuple[str, str, int]]:
        """(page id, tenant, generation) of every page that still has work: accepted jobs (those in retry_wait once
        their next_attempt_at has come), or running ones whose lease expired (their run died). Oldest page first.
        The generation (the lease tokens of that work) grows with every attempt and survives `evidence replay`, so
        a run key of page id + generation names one dispatch of one page."""
        docs, jobs = self.document_jobs.c, self.ledger.jobs.c
        now = time.time()
        due = or_(jobs.next_attempt_at.is_(None), jobs.next_attempt_at <= now)  # not waiting in retry_wait
        workable = or_(
            and_(jobs.state == states.ACCEPTED, due), and_(jobs.state == states.RUNNING, jobs.lease_expires_at < now)
        )
        query = (
            select(docs.page_id, docs.tenant, func.sum(jobs.lease_token).label("generation"))
            .join(self.ledger.jobs, jobs.job_id == docs.job_id)
            .where(workable, docs.page_id.is_not(None))
            .group_by(docs.page_id, docs.tenant)
            .order_by(func.min(docs.accepted_at))
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            return [(row.page_id, row.tenant, int(row.generation)) for row in conn.execute(query)]

    def record_lost_attempts(self, budget, actor: str) -> list[tuple[str, str]]:
        """Every document job whose lease expired while it ran is a failed attempt (record_lost_attempt): it waits
        in retry_wait or is dead, and no page is dispatched for a job whose budget is spent. Returns (job id, new
        state) of each."""
        docs, jobs = self.document_jobs.c, self.ledger.jobs.c
        query = (
            select(jobs.job_id, jobs.lease_token)
            .join(self.document_jobs, docs.job_id == jobs.job_id)
            .where(docs.operation != EVIDENCE, jobs.state == states.RUNNING, jobs.lease_expires_at < time.time())
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            expired = conn.execute(query).all()
        moved = [(row.job_id, self.ledger.record_lost_attempt(row.job_id, row.lease_token, actor, budget))
                 for row in expired]
        for job_id, state in moved:
            if state in states.CLOSED:
                self.mark_finished(job_id)
        return [(job_id, state) for job_id, state in moved if state is not None]

    def page_jobs(self, page_id: str) -> list[dict]:
        """The jobs of a page (any state), in acceptance order."""
        docs = self.document_jobs.c
        with classified_errors(), self.ledger.engine.connect() as conn:
            rows = conn.execute(
                select(docs.job_id, docs.tenant).where(docs.page_id == page_id).order_by(docs.accepted_at)
            ).all()
            return [self._job(conn, row.tenant, row.job_id) for row in rows]

    def month_jobs(self, tenant: str, period: str) -> list[dict]:
        """``tenant``'s document jobs accepted in ``period`` (not its evidence requests), by job id."""
        docs, jobs = self.document_jobs.c, self.ledger.jobs.c
        query = (
            select(docs.job_id)
            .join(self.ledger.jobs, jobs.job_id == docs.job_id)
            .where(docs.tenant == tenant, jobs.period == period, docs.operation != EVIDENCE)
            .order_by(docs.job_id)
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            return [self._job(conn, tenant, job_id) for job_id in conn.execute(query).scalars()]

    def recent_decisions(self, operation: str, limit: int) -> list[dict]:
        """The ``limit`` most recently finished jobs of ``operation`` whose outputs committed, newest first."""
        docs = self.document_jobs.c
        query = (
            select(docs.tenant, docs.job_id)
            .where(docs.operation == operation, docs.outputs.is_not(None))
            .order_by(docs.finished_at.desc(), docs.job_id)
            .limit(limit)
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            return [self._job(conn, row.tenant, row.job_id) for row in conn.execute(query).all()]

    def waiting_evidence_jobs(self) -> list[dict]:
        """Accepted evidence jobs, oldest first: each needs (or has) its Dagster run."""
        docs, jobs = self.document_jobs.c, self.ledger.jobs.c
        query = (
            select(docs.tenant, docs.job_id)
            .join(self.ledger.jobs, jobs.job_id == docs.job_id)
            .where(jobs.state == states.ACCEPTED, docs.operation == EVIDENCE)
            .order_by(docs.accepted_at)
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            return [self._job(conn, row.tenant, row.job_id) for row in conn.execute(query).all()]

    def latest_publication(self, tenant: str, period: str) -> dict | None:
        pubs = self.ledger.publications.c
        query = (
            select(self.ledger.publications)
            .where(pubs.tenant == tenant, pubs.period == period)
            .order_by(pubs.event_seq.desc())
            .limit(1)
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else dict(row._mapping)

    def mark_started(self, job_id: str) -> None:
        with classified_errors(), self.ledger.writing() as conn:
            self._mark_started(conn, job_id)

    def _mark_started(self, conn: Connection, job_id: str) -> None:
        conn.execute(self._started_update, {"started_job_id": job_id, "started_at": time.time()})

    def start(self, job: dict, owner: str, ttl_seconds: float, stage: StageChange | None) -> Lease | None:
        """Lease a document job for an attempt, committed with its start time and, for a staged operation, its
        first stage: one transaction, not three. None when the job already succeeded; acquire_lease's errors."""

        def started(conn: Connection, lease: Lease) -> None:
            self._mark_started(conn, job["job_id"])
            if stage is not None:
                self._append_stage(conn, job, lease, stage, owner)

        return self.ledger.acquire_lease(job["job_id"], owner, ttl_seconds, then=started)

    def mark_finished(self, job_id: str) -> None:
        """A job closed by a failure (rejected or dead) has finished too."""
        with classified_errors(), self.ledger.writing() as conn:
            conn.execute(self._finished_update, {"finished_job_id": job_id, "finished_at": time.time()})

    def complete(
        self,
        job: dict,
        lease: Lease,
        event_type: str,
        subject_sha256: str,
        outputs: dict,
        actor: str,
        rejected: str | None = None,
        derived: tuple[tuple[str, dict], ...] = (),
        stage: StageChange | None = None,
    ) -> int:
        """Commit a document job's outputs: its event, the outputs and job -> succeeded in one transaction, fenced
        by ``lease``; or, for a decision against the input (``rejected``, its reason code), the outputs and then
        `job.rejected`, job -> rejected. Each of ``derived`` ((output sha256, details naming its ``artifact_id``))
        gets its `document.derived` event in the same transaction, unless an earlier job of the same content
        committed it; a staged job's last ``stage`` (committing) comes first. Returns the outputs event's ledger
        position."""

        def commit(conn: Connection) -> int:
            state = states.REJECTED if rejected else states.SUCCEEDED
            self._fence(conn, lease, state=state, lease_expires_at=None, last_reason=rejected)
            if stage is not None:
                self._append_stage(conn, job, lease, stage, actor)
            tenant_month = TenantMonth(job["tenant"], job["period"])
            for sha256, details in derived:
                if self._find_event(conn, job["tenant"], EventType.DOCUMENT_DERIVED, "artifact_id",
                                    details["artifact_id"]) is None:
                    self.ledger._append(conn, tenant_month, EventType.DOCUMENT_DERIVED, sha256, actor,
                                        details | {"job_id": job["job_id"]})
            event = self.ledger._append(
                conn,
                tenant_month,
                event_type,
                subject_sha256,
                actor,
                outputs | {"job_id": job["job_id"], "lease_token": lease.token},
            )
            if rejected:
                attempt = self.ledger._job(conn, job["job_id"])["attempts"]
                self.ledger._append(
                    conn,
                    tenant_month,
                    EventType.JOB_REJECTED,
                    job["request_sha256"],
                    actor,
                    {"job_id": job["job_id"], "reason": rejected, "attempt": attempt},
                )
            conn.execute(self._finished_update, {"finished_job_id": job["job_id"], "finished_at": time.time(),
                                                 "outputs": canonical(outputs | {"ledger_seq": event.seq})})
            return event.seq

        return self.ledger._transact(commit)

    def _fence(self, conn: Connection, lease: Lease, **values) -> None:
        """Update the job only while ``lease`` is its newest, unexpired lease; LEASE_FENCED otherwise."""
        if not self.ledger._update_held(conn, lease, **values):
            raise EvidenceError(
                ReasonCode.LEASE_FENCED, f"lease {lease.token} of job {lease.job_id[:12]} is no longer held"
            )

    def record_stage(self, job: dict, lease: Lease, stage: StageChange, actor: str) -> None:
        """A staged job's `document.stage` event, fenced by ``lease`` like every transition (the job's state stays
        running; the stage is what its status shows). Committed without waiting for the disk: the job's outcome,
        durable, covers it; a power loss before then may undo the stages of an attempt that then never ends,
        whose lease runs out and whose retry records its own."""

        def record(conn: Connection) -> None:
            self._fence(conn, lease)
            self._append_stage(conn, job, lease, stage, actor)

        self.ledger._transact(record, durable=False)

    def _append_stage(self, conn: Connection, job: dict, lease: Lease, stage: StageChange, actor: str) -> None:
        self.ledger._append(
            conn,
            TenantMonth(job["tenant"], job["period"]),
            EventType.DOCUMENT_STAGE,
            job["request_sha256"],
            actor,
            {"job_id": job["job_id"], "lease_token": lease.token, "prior": stage.prior, "stage": stage.stage}
            | stage.details,
        )

    def stage(self, job: dict) -> str | None:
        """The stage the job's current lease last recorded, or None."""
        events = self.ledger.audit_events.c
        query = (
            select(events.body)
            .where(
                events.event_type == EventType.DOCUMENT_STAGE,
                events.subject_sha256 == job["request_sha256"],
                events.tenant == job["tenant"],
            )
            .order_by(events.seq.desc())
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            for body in conn.execute(query).scalars():  # jobs with the same request share the subject
                details = event_body(body)["details"]
                if (details["job_id"], details["lease_token"]) == (job["job_id"], job["lease_token"]):
                    return details["stage"]
        return None


def _serialize_admissions(conn: Connection) -> None:
    """Admissions that check a quota commit one after another from the check on. SQLite's writers are serial
    already; under PostgreSQL's read committed two could read the same counts (the chain's unique prev_hash
    catches only those that also read the same head), so they queue on a transaction-scoped advisory lock."""
    if conn.dialect.name == "postgresql":
        conn.execute(_ADMISSIONS_LOCK)


_ADMISSIONS_LOCK = text("SELECT pg_advisory_xact_lock(hashtext('evidence_admissions'))")


def stage_of(job: dict, recorded: str | None) -> str:
    """What a job's status shows as its stage: accepted (retry_wait after a transient failure, until its
    next_attempt_at and then until a page run leases it), the stage a running
    job last ``recorded`` (running when it records none), completed, rejected or dead."""
    if job["state"] == states.ACCEPTED:
        return "retry_wait" if job["attempts"] else "accepted"
    return _FINAL_STAGES.get(job["state"]) or recorded or states.RUNNING


_FINAL_STAGES = {states.SUCCEEDED: "completed", states.REJECTED: "rejected", states.DEAD: "dead"}


def _owned_row(conn: Connection, table, matches, tenant: str) -> dict | None:
    """The row of ``table`` that ``matches`` and belongs to ``tenant``, or None (another tenant's does not exist)."""
    row = conn.execute(select(table).where(matches, table.c.tenant == tenant)).first()
    return None if row is None else dict(row._mapping)
