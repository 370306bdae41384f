"""Append-only audit events, hash-chained, committed in the same transaction as what they describe.

Over 400 lines because the engine, its transactions, the chain and publications depend on each other's invariants
(an append and the row it describes commit together); the ledger's other pieces take this core.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import (
    URL,
    ColumnElement,
    Connection,
    Engine,
    MetaData,
    Select,
    create_engine,
    event,
    func,
    inspect,
    make_url,
    select,
    text,
)
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import (
    ArgumentError,
    IntegrityError,
    OperationalError,
    ProgrammingError,
)
from sqlalchemy.pool import ConnectionPoolEntry

from evidence_pipeline import jsonread
from evidence_pipeline.canonical import canonical, utc_iso
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger import announcements, merkle, mirrors
from evidence_pipeline.ledger import job_states as states
from evidence_pipeline.ledger.chain import GENESIS_HASH, chain_hash
from evidence_pipeline.ledger.db import Done, LostRace, classified_errors
from evidence_pipeline.ledger.jobs import JobTransitions, Lease
from evidence_pipeline.ledger.rows import Job, PublicationClaim, PublicationRecord
from evidence_pipeline.models import Deployment, EventType, LedgerEvent, TenantMonth
from evidence_pipeline.paths import private_dirs

VERSION_TABLE = "evidence_ledger_version"  # Dagster keeps its own alembic_version in the same database


_APPEND_ATTEMPTS = 20
_CHAIN_HEAD = "evidence_chain_head"  # in a writing transaction's conn.info: the hash of its last appended event
_APPEND_CHECK = "evidence_append_check"  # in its conn.info: what each event it appends must pass (check_appends)
_BUSY_SECONDS = 30  # how long a writer waits for the write lock (SQLite's busy_timeout says the same)
Item = TypeVar("Item")  # one caller's item of work in _transact_together


def event_body(text: str) -> dict[str, Any]:
    """An event body as the ledger stored it: bounded JSON with exactly the fields _append writes."""
    body = jsonread.loads(text, ReasonCode.LEDGER_INVALID, "an audit event body")
    if not isinstance(body, dict) or not mirrors.is_event_body(body):
        raise EvidenceError(ReasonCode.LEDGER_INVALID, "an audit event body does not have the fields of an event")
    return body


def _serialize_sqlite_writers(engine: Engine, read_only: bool) -> None:
    """Parallel workers share the embedded SQLite ledger: a writing transaction takes the write lock when it
    begins (a deferred read-then-write would fail with SQLITE_BUSY instead of waiting) and waits up to 30 s for
    it; reads begin deferred, and WAL lets them run alongside the writer. A read-only ledger changes no mode."""

    @event.listens_for(engine, "connect")
    def connect(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy, not the driver, issues BEGIN
        dbapi_connection.execute(f"PRAGMA busy_timeout = {_BUSY_SECONDS * 1000}")
        if not read_only:
            dbapi_connection.execute("PRAGMA journal_mode = WAL")

    @event.listens_for(engine, "begin")
    def begin(connection: Connection) -> None:
        # Straight to the driver: two statements on every transaction, and SQLAlchemy's execution path for each
        # cost more than SQLite's work (about 0.1 ms).
        # A connection that begins is live: it has its driver connection (None only once invalidated).
        options = connection.get_execution_options()
        driver = cast(DBAPIConnection, connection.connection.driver_connection)
        if not options.get("ledger_writes"):
            driver.execute("BEGIN")
            return
        # Set per transaction, before it begins (under WAL, NORMAL leaves the log's sync to the next FULL commit).
        driver.execute(f"PRAGMA synchronous = {'FULL' if options['ledger_durable'] else 'NORMAL'}")
        driver.execute("BEGIN IMMEDIATE")


class _SQLiteWriters:
    """One writing transaction at a time on an SQLite ledger: a thread lock within the process and an flock on a
    file beside the database across processes. Writers queue here rather than in SQLite's busy handler, whose
    sleeps grow to 100 ms: under a burst the lock would sit free while every waiter sleeps."""

    def __init__(self, lock_path: Path | None):
        self._thread = threading.Lock()
        self._lock_path = lock_path  # None: an in-memory database, one process
        self._fd: int | None = None

    def __enter__(self) -> None:
        deadline = time.monotonic() + _BUSY_SECONDS
        if not self._thread.acquire(timeout=_BUSY_SECONDS):
            raise _busy()
        try:
            if self._lock_path is not None:
                self._fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
                while not _try_flock(self._fd):  # polled, so that the wait stays bounded
                    if time.monotonic() > deadline:
                        raise _busy()
                    time.sleep(0.001)
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *_exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None
        self._thread.release()


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _busy() -> EvidenceError:
    return EvidenceError(ReasonCode.LEDGER_UNAVAILABLE, f"the ledger's write lock was busy for {_BUSY_SECONDS} s")


def migration_config(connection: Connection | None = None) -> Config:
    """The Alembic configuration of the ledger's migrations, run on ``connection`` (no alembic.ini)."""
    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


class Ledger(JobTransitions):
    """``read_only`` (verification, proofs) opens an existing ledger without migrating it or writing anything:
    a missing SQLite file is LEDGER_NOT_FOUND, a database without our schema LEDGER_INVALID."""

    def __init__(self, url: str, read_only: bool = False):
        try:
            parsed = make_url(url)
        except ArgumentError:
            raise EvidenceError(ReasonCode.CONFIG_INVALID, "EVIDENCE_LEDGER_URL is not a database URL") from None
        sqlite = parsed.get_backend_name() == "sqlite"
        if sqlite and parsed.database:
            parsed = _sqlite_file(parsed, parsed.database, read_only)
        try:
            self.engine = create_engine(
                parsed, **_connect_arguments(parsed, read_only), **({} if sqlite and not parsed.database else _POOL)
            )  # in memory: one
        except (ArgumentError, ImportError):
            raise EvidenceError(
                ReasonCode.CONFIG_INVALID, "EVIDENCE_LEDGER_URL names an unsupported database driver"
            ) from None
        if sqlite:
            _serialize_sqlite_writers(self.engine, read_only)
        self._writer = self.engine.execution_options(ledger_writes=True, ledger_durable=True)
        self._progress_writer = self.engine.execution_options(ledger_writes=True, ledger_durable=False)
        # A read of one statement needs no transaction: on PostgreSQL its BEGIN and ROLLBACK were two more round
        # trips for each request's token lookup. (SQLite's read transaction costs no round trip.)
        self._reader = self.engine if sqlite else self.engine.execution_options(isolation_level="AUTOCOMMIT")
        self._writers: contextlib.AbstractContextManager[None] = contextlib.nullcontext()  # PostgreSQL's locks do
        if sqlite and not read_only:
            self._writers = _SQLiteWriters(Path(parsed.database + ".writers") if parsed.database else None)
        with classified_errors():
            self._expect_schema() if read_only else self._migrate()
        # The migrations are the one definition of the schema; queries use the tables as the database has them.
        # Every table of the ledger is named evidence_*: it may share its database with Dagster's storage.
        tables = MetaData()
        with classified_errors():
            tables.reflect(
                self.engine,
                only=(
                    "evidence_audit_events",
                    "evidence_publications",
                    "evidence_jobs",
                    "evidence_document_jobs",
                    "evidence_publication_claims",
                    "evidence_tenants",
                    "evidence_api_tokens",
                    "evidence_documents",
                    "evidence_batches",
                    "evidence_job_attempts",
                    "evidence_tenant_storage",
                ),
            )
        self.audit_events = tables.tables["evidence_audit_events"]
        self.publications = tables.tables["evidence_publications"]
        self.claims = tables.tables["evidence_publication_claims"]  # who is publishing a tenant-month (supersedes)
        self.jobs = tables.tables["evidence_jobs"]
        self.ended_attempts = tables.tables["evidence_job_attempts"]  # the attempts a replay ended (jobs.py)
        self.document_jobs = tables.tables["evidence_document_jobs"]  # a document job's identity (ledger verify)
        self.tenants = tables.tables["evidence_tenants"]  # the tenant registry (ledger/tenants.py)
        # Intake's tables, reflected here with the rest (one reflection per process): their writes and reads are
        # the pieces' beside this module (tokens.py, documents.py, batches.py).
        self.api_tokens = tables.tables["evidence_api_tokens"]
        self.documents = tables.tables["evidence_documents"]
        self.batches = tables.tables["evidence_batches"]
        self.tenant_storage = tables.tables["evidence_tenant_storage"]  # each tenant's stored document bytes
        # Every append runs these two: built once, they cost no statement construction per event.
        self._chain_head = select(self.audit_events.c.event_hash).order_by(self.audit_events.c.seq.desc()).limit(1)
        self._insert_events = self.audit_events.insert().returning(
            self.audit_events.c.event_hash, self.audit_events.c.seq
        )
        self._turn = threading.Lock()  # _transact_together: whose transaction commits the waiting callers' work
        self._waiting: list[_Waiting] = []
        self._waiting_mutex = threading.Lock()

    def record(
        self, tenant_month: TenantMonth | Deployment, event_type: str, subject_sha256: str, actor: str, **details: Any
    ) -> LedgerEvent:
        """Append one event in its own transaction (of the deployment, no tenant, when ``tenant_month`` is a
        Deployment)."""
        return self._transact(
            lambda conn: self._append(conn, tenant_month, event_type, subject_sha256, actor=actor, details=details)
        )

    def publish(self, row: dict[str, Any], lease: Lease, actor: str, **details: Any) -> tuple[PublicationRecord, bool]:
        """Commit the publication row, its `bundle.published` event, job -> succeeded and the tenant's
        `evidence.delivered` webhook (ledger/outbox.py) in one transaction.

        Returns (row, created). A publication that already exists for the identity wins: the caller converges on it.
        The commit is fenced: an attempt whose lease expired or was taken over gets LEASE_FENCED and commits nothing,
        and so does one while another attempt holds the tenant-month's publication claim (`claim_publication`).
        The corrections chain is a compare-and-swap in the same transaction: ``details["supersedes"]`` must name the
        tenant-month's current bundle (and be absent for its first), or SUPERSEDES_STALE commits nothing.
        """
        tenant_month = TenantMonth(row["tenant"], row["period"])
        supersedes = details.get("supersedes")

        def commit(conn: Connection) -> tuple[PublicationRecord, bool]:
            existing = self._publication(conn, row["identity"])
            if existing is not None:
                self._release_claim(conn, tenant_month, row["identity"])
                return existing, False
            if not self._update_held(conn, lease, state=states.SUCCEEDED, lease_expires_at=None, last_reason=None):
                raise EvidenceError(
                    ReasonCode.LEASE_FENCED, f"lease {lease.token} of job {lease.job_id[:12]} is no longer held"
                )
            claim = self._claim(conn, tenant_month)
            if claim is not None and (claim.identity, claim.job_id, claim.lease_token) != (
                row["identity"],
                lease.job_id,
                lease.token,
            ):
                raise EvidenceError(
                    ReasonCode.LEASE_FENCED, f"another attempt holds the publication claim of {tenant_month}"
                )
            head = self._current(conn, tenant_month)
            if (head and head.identity) != (supersedes and supersedes.get("identity")):
                raise EvidenceError(
                    ReasonCode.SUPERSEDES_STALE,
                    f"the statement supersedes {_short(supersedes and supersedes.get('identity'))}, but the "
                    f"current bundle of {tenant_month} is {_short(head and head.identity)}",
                )
            event = self._append(
                conn,
                tenant_month,
                EventType.BUNDLE_PUBLISHED,
                row["report_sha256"],
                actor=actor,
                details=details | row | {"job_id": lease.job_id, "lease_token": lease.token},
            )
            conn.execute(self.publications.insert().values(**row, event_seq=event.seq))
            self._release_claim(conn, tenant_month, row["identity"])
            # The tenant is told of its bundle in the transaction that publishes it, whoever asked for it.
            announcements.bundle_published(conn, event)
            return PublicationRecord.of(conn.execute(self._publication_query(row["identity"])).one()), True

        return self._transact(commit)

    def claim_publication(
        self, tenant_month: TenantMonth, identity: str, lease: Lease, take_over: str | None = None
    ) -> Claim:
        """Claim the tenant-month for publishing ``identity`` under ``lease``, naming the bundle it will supersede.

        The claim is what keeps the corrections chain linear while a statement is signed: between the claim and the
        commit nobody else can commit a bundle of the tenant-month, so the `supersedes` this attempt signs is still
        the current bundle when it commits. A claim lives as long as its attempt's lease. It is granted when there
        is none, when it is this identity's own (a retry), when its identity is already published, or when the
        caller names the holder in ``take_over`` and the holder's lease is no longer live (the caller checked that
        the holder left no signed statement behind). Otherwise the answer names the holder and whether its lease
        is live: wait for it, or complete its publication (pipeline._claim does both).
        """

        def claim(conn: Connection) -> Claim:
            if not self._lease_live(conn, lease.job_id, lease.token):
                raise EvidenceError(
                    ReasonCode.LEASE_FENCED, f"lease {lease.token} of job {lease.job_id[:12]} is no longer held"
                )
            held = self._claim(conn, tenant_month)
            head = self._current(conn, tenant_month)
            if held is not None and held.identity != identity and self._publication(conn, held.identity) is None:
                live = self._lease_live(conn, held.job_id, held.lease_token)
                if live or take_over != held.identity:
                    return Claim(False, head, held, live)
            values = {
                "identity": identity,
                "job_id": lease.job_id,
                "lease_token": lease.token,
                "supersedes": head and head.identity,
                "claimed_at": time.time(),
            }
            if held is None:
                conn.execute(
                    self.claims.insert().values(tenant=tenant_month.tenant, period=tenant_month.period, **values)
                )
            elif (
                conn.execute(
                    self.claims.update()
                    .where(
                        *self._claim_of(tenant_month),
                        self.claims.c.identity == held.identity,
                        self.claims.c.job_id == held.job_id,
                        self.claims.c.lease_token == held.lease_token,
                    )
                    .values(**values)
                ).rowcount
                == 0
            ):
                raise LostRace()
            return Claim(True, head)

        return self._transact(claim)

    def current_publication(self, tenant_month: TenantMonth) -> PublicationRecord | None:
        """The tenant-month's current bundle: its newest publication (the head of its corrections chain)."""
        with classified_errors(), self.engine.connect() as conn:
            return self._current(conn, tenant_month)

    def publication(self, identity: str) -> PublicationRecord | None:
        with classified_errors(), self.engine.connect() as conn:
            return self._publication(conn, identity)

    def events_about(self, event_type: str, subject_sha256: str) -> list[dict[str, Any]]:
        """Bodies of the events of ``event_type`` about ``subject_sha256``, oldest first."""
        query = select(self.audit_events.c.body).where(
            self.audit_events.c.event_type == event_type, self.audit_events.c.subject_sha256 == subject_sha256
        )
        with classified_errors(), self.engine.connect() as conn:
            return [event_body(body) for body in conn.execute(query.order_by(self.audit_events.c.seq)).scalars()]

    def events_of_type(self, event_type: str, tenant: str | None = None) -> list[dict[str, Any]]:
        """Bodies of every event of ``event_type`` (only ``tenant``'s when given), oldest first."""
        return list(self.iter_events_of_type(event_type, tenant))

    def iter_events_of_type(
        self, event_type: str, tenant: str | None = None, detail: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """``events_of_type``, one body at a time (a year of 10,000 tenants holds 120,000 of one type), and only
        the events whose details have the field ``detail``, when given. That filter runs in the database on the
        stored text, which is canonical JSON (the key reads ``"detail":``); each body it passes is still parsed and
        checked, and its details must have the field."""
        events = self.audit_events.c
        query = select(events.body).where(events.event_type == event_type)
        if tenant is not None:
            query = query.where(events.tenant == tenant)
        if detail is not None:
            query = query.where(events.body.contains(canonical(detail) + ":", autoescape=True))
        with classified_errors(), self.engine.connect() as conn:
            rows = conn.execution_options(stream_results=True, yield_per=1000).execute(query.order_by(events.seq))
            for text_ in rows.scalars():
                body = event_body(text_)
                if detail is None or detail in body["details"]:
                    yield body

    def offboarded_tenants(self, tenant: str | None = None) -> set[str]:
        """The tenants with a `tenant.offboarded` event (only ``tenant``, when given): no new work starts for them."""
        events = self.audit_events.c
        query = select(events.tenant).where(events.event_type == EventType.TENANT_OFFBOARDED)
        if tenant is not None:
            query = query.where(events.tenant == tenant)
        with classified_errors(), self.engine.connect() as conn:
            return set(conn.execute(query).scalars())

    def stored_events(self, event_type: str, tenant: str) -> list[tuple[LedgerEvent, str, bytes]]:
        """Every event of ``event_type`` of ``tenant``, oldest first, as the ledger stores it: the event, its
        prev_hash and the exact body bytes that the hash chain and the Merkle tree hash (an audit package's)."""
        events = self.audit_events.c
        query = (
            select(events.seq, events.event_type, events.event_hash, events.prev_hash, events.body)
            .where(events.event_type == event_type, events.tenant == tenant)
            .order_by(events.seq)
        )
        with classified_errors(), self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [
            (
                LedgerEvent(row.seq, row.event_type, row.event_hash, event_body(row.body)),
                row.prev_hash,
                row.body.encode("utf-8"),
            )
            for row in rows
        ]

    def leaf_index(self, seq: int) -> int:
        """Event ``seq``'s position in the Merkle tree: how many events come before it (a sequence may skip)."""
        events = self.audit_events.c
        with classified_errors(), self.engine.connect() as conn:
            query = select(func.count()).select_from(self.audit_events).where(events.seq < seq)
            return conn.execute(query).scalar_one()

    def published_tenant_months(self) -> list[tuple[int, str, str]]:
        """(seq, tenant, period) of every `bundle.published` event, oldest first, read from the hashed bodies (not
        their mirror columns): what an audit sample's population is drawn from."""
        events = self.audit_events.c
        query = select(events.seq, events.body).where(events.event_type == EventType.BUNDLE_PUBLISHED)
        with classified_errors(), self.engine.connect() as conn:
            rows = conn.execute(query.order_by(events.seq)).all()
        return [(row.seq, body["tenant"], body["period"]) for row in rows for body in (event_body(row.body),)]

    def event_or_none(self, seq: int) -> LedgerEvent | None:
        with classified_errors(), self.engine.connect() as conn:
            row = conn.execute(select(self.audit_events).where(self.audit_events.c.seq == seq)).first()
        return None if row is None else LedgerEvent(row.seq, row.event_type, row.event_hash, event_body(row.body))

    def event(self, seq: int) -> LedgerEvent:
        event = self.event_or_none(seq)
        if event is None:
            raise EvidenceError(ReasonCode.LEDGER_INVALID, f"audit event {seq} does not exist")
        return event

    def leaves(self, limit: int | None = None) -> list[tuple[int, bytes]]:
        """(seq, RFC 9162 leaf hash of the event's canonical bytes) for every event (the first ``limit``), in ledger
        order."""
        with classified_errors(), self.engine.connect() as conn:
            events = self.audit_events.c
            rows = conn.execute(select(events.seq, events.body).order_by(events.seq).limit(limit))
            return [(row.seq, merkle.leaf_hash(row.body.encode("utf-8"))) for row in rows]

    def verify_chain(self) -> int:
        """Recompute every link and check every stored copy of a hashed body (see mirrors.py); return the number
        of events. A rewritten, deleted or reordered row fails, and so does an edited column that mirrors one."""
        prev = GENESIS_HASH
        count = 0
        published: dict[int, dict[str, Any]] = {}  # seq -> details of each bundle.published event
        current: dict[tuple[str, str], str] = {}  # (tenant, period) -> identity of its newest bundle so far
        job_events: dict[str, list[dict[str, Any]]] = {}  # job_id -> bodies of the events that name it, oldest first
        tenant_events: dict[str, dict[str, int]] = {}  # tenant -> {tenant event type: seq of its first}
        replays: dict[int, dict[str, Any]] = {}  # seq -> body of each job.replayed event opening a new attempt (0011)
        with classified_errors(), self.engine.connect() as conn:
            for row in conn.execute(select(self.audit_events).order_by(self.audit_events.c.seq)):
                if row.prev_hash != prev or chain_hash(prev, row.body) != row.event_hash:
                    raise EvidenceError(ReasonCode.LEDGER_INVALID, f"audit event {row.seq} breaks the hash chain")
                body = event_body(row.body)
                if any(body[column] != getattr(row, column) for column in mirrors.EVENT_COLUMNS):
                    raise EvidenceError(
                        ReasonCode.LEDGER_INVALID, f"audit event {row.seq} columns differ from its body"
                    )
                if body["event_type"] == EventType.BUNDLE_PUBLISHED:
                    published[row.seq] = body["details"]
                    _check_supersedes(row.seq, body, current)
                if body["event_type"] in mirrors.TENANT_EVENTS:
                    tenant_events.setdefault(body["tenant"], {}).setdefault(body["event_type"], row.seq)
                if body["event_type"] == EventType.JOB_REPLAYED and "attempt_id" in body["details"]:
                    replays[row.seq] = body
                if isinstance(body["details"].get("job_id"), str):
                    job_events.setdefault(body["details"]["job_id"], []).append(body)
                prev, count = row.event_hash, count + 1
            publications = [PublicationRecord.of(row) for row in conn.execute(select(self.publications))]
            jobs = [Job.of(row) for row in conn.execute(select(self.jobs))]
            document_jobs = {row.job_id: row for row in conn.execute(select(self.document_jobs))}
            registry = [dict(row._mapping) for row in conn.execute(select(self.tenants))]
            attempts = [dict(row._mapping) for row in conn.execute(select(self.ended_attempts))]
        if sorted(publication.event_seq for publication in publications) != sorted(published):
            raise EvidenceError(ReasonCode.LEDGER_INVALID, "publications and bundle.published events do not pair up")
        for publication in publications:
            if not mirrors.publication_matches(publication, published[publication.event_seq]):
                raise EvidenceError(
                    ReasonCode.LEDGER_INVALID, f"the publication of event {publication.event_seq} differs from it"
                )
        if not mirrors.registry_matches(registry, tenant_events):
            raise EvidenceError(ReasonCode.LEDGER_INVALID, "the tenant registry differs from its tenant events")
        for job in jobs:
            if not mirrors.job_matches(job, job_events.get(job.job_id, []), document_jobs.get(job.job_id)):
                raise EvidenceError(ReasonCode.LEDGER_INVALID, f"job {job.job_id[:12]} differs from its events")
        if sorted(attempt["replay_seq"] for attempt in attempts) != sorted(replays) or not all(
            mirrors.attempt_matches(attempt, replays[attempt["replay_seq"]]) for attempt in attempts
        ):
            raise EvidenceError(ReasonCode.LEDGER_INVALID, "ended job attempts differ from their job.replayed events")
        return count

    def _append(
        self,
        conn: Connection,
        tenant_month: TenantMonth | Deployment,
        event_type: str,
        subject_sha256: str,
        *,
        actor: str,
        details: dict[str, Any],
    ) -> LedgerEvent:
        return self._append_many(conn, [(tenant_month, event_type, subject_sha256, actor, details)])[0]

    def _append_many(
        self, conn: Connection, entries: list[tuple[TenantMonth | Deployment, str, str, str, dict[str, Any]]]
    ) -> list[LedgerEvent]:
        """Append one event per (tenant_month, event_type, subject_sha256, actor, details), chained in order, in
        one INSERT: on PostgreSQL each statement is a round trip, and admissions make theirs under one lock."""
        # Within one writing transaction the head is the event it appended last: prev_hash is unique, so no other
        # writer can have appended after it before this transaction commits.
        prev = conn.info.get(_CHAIN_HEAD) or conn.execute(self._chain_head).scalar() or GENESIS_HASH
        check = conn.info.get(_APPEND_CHECK, _unauthorized)
        bodies: list[dict[str, Any]] = []
        rows: list[dict[str, str]] = []
        for tenant_month, event_type, subject_sha256, actor, details in entries:
            event_type = str(event_type)  # an EventType is stored as its plain string
            event_id = str(uuid.uuid4())
            body = {
                "event_id": event_id,
                "event_type": event_type,
                "tenant": tenant_month.tenant,
                "period": tenant_month.period,
                "subject_sha256": subject_sha256,
                "actor": actor,
                "recorded_at": utc_iso(timespec="microseconds"),
                "details": details,
            }
            check(body)
            body_text = canonical(body)
            event_hash = chain_hash(prev, body_text)
            bodies.append(body)
            rows.append(
                {
                    "event_id": event_id,
                    "event_type": event_type,
                    "tenant": tenant_month.tenant,
                    "period": tenant_month.period,
                    "subject_sha256": subject_sha256,
                    "body": body_text,
                    "prev_hash": prev,
                    "event_hash": event_hash,
                }
            )
            prev = event_hash
        seqs = {event_hash: seq for event_hash, seq in conn.execute(self._insert_events, rows)}  # in any order
        conn.info[_CHAIN_HEAD] = prev
        return [
            LedgerEvent(seqs[row["event_hash"]], row["event_type"], row["event_hash"], body)
            for row, body in zip(rows, bodies)
        ]

    def check_appends(self, conn: Connection, check: Callable[[dict[str, Any]], None]) -> None:
        """Every event this writing transaction appends from now on is first given to ``check`` (its body, exactly
        as it will be stored), which raises to refuse it: the action gate's re-check, the one the auditor runs."""
        conn.info[_APPEND_CHECK] = check

    def pin_chain_head(self, conn: Connection) -> None:
        """Read the chain head before the reads a decision rests on: this transaction's first append then names it,
        so that if any writer appended after these reads, that append loses the race and the transaction runs again
        on fresh reads (``_transact``). Without it, a writer committing between a read and the append goes unseen."""
        conn.info[_CHAIN_HEAD] = conn.execute(self._chain_head).scalar() or GENESIS_HASH

    def _publication(self, conn: Connection, identity: str) -> PublicationRecord | None:
        row = conn.execute(self._publication_query(identity)).first()
        return None if row is None else PublicationRecord.of(row)

    def _publication_query(self, identity: str) -> Select[*tuple[Any, ...]]:
        return select(self.publications).where(self.publications.c.identity == identity)

    def _current(self, conn: Connection, tenant_month: TenantMonth) -> PublicationRecord | None:
        p = self.publications.c
        query = select(self.publications).where(p.tenant == tenant_month.tenant, p.period == tenant_month.period)
        row = conn.execute(query.order_by(p.event_seq.desc()).limit(1)).first()
        return None if row is None else PublicationRecord.of(row)

    def _claim_of(self, tenant_month: TenantMonth) -> tuple[ColumnElement[bool], ColumnElement[bool]]:
        return self.claims.c.tenant == tenant_month.tenant, self.claims.c.period == tenant_month.period

    def _claim(self, conn: Connection, tenant_month: TenantMonth) -> PublicationClaim | None:
        row = conn.execute(select(self.claims).where(*self._claim_of(tenant_month))).first()
        return None if row is None else PublicationClaim.of(row)

    def _release_claim(self, conn: Connection, tenant_month: TenantMonth, identity: str) -> None:
        conn.execute(self.claims.delete().where(*self._claim_of(tenant_month), self.claims.c.identity == identity))

    def _expect_schema(self) -> None:
        """A read-only ledger must already be at the newest migration: nothing here creates or upgrades it."""
        with self.engine.connect() as conn:
            has_versions = inspect(conn).has_table(VERSION_TABLE)
            version = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar() if has_versions else None
        if version != _head_revision():
            raise EvidenceError(
                ReasonCode.LEDGER_INVALID, "the database holds no evidence ledger at the current schema version"
            )

    def _migrate(self) -> None:
        """Bring the schema to the newest migration. Concurrent first starts serialize on a lock or retry."""
        for attempt in range(5):
            try:
                with self.writing() as conn:
                    if conn.dialect.name == "postgresql":
                        conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('evidence_ledger_migrations'))"))
                    command.upgrade(migration_config(conn), "head")
                return
            except (OperationalError, IntegrityError, ProgrammingError):
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))  # another process was creating the schema: look again

    def reading(self) -> Connection:
        """A connection for a read of one statement (each statement of it sees the database as it then is)."""
        return self._reader.connect()

    @contextlib.contextmanager
    def writing(self, durable: bool = True) -> Iterator[Connection]:
        """A transaction that writes (every write goes through here).

        ``durable=False`` is for progress that a later commit of the same work covers (a job's intermediate
        stages): its commit does not wait for the disk (SQLite synchronous=NORMAL under WAL, PostgreSQL
        synchronous_commit=off). A crash of the machine (or of the PostgreSQL server) may undo it, then only with
        every transaction after it and never in part, so the chain stays a consistent prefix; a crash of this
        process loses nothing. The next durable commit makes it durable too: both write their log in commit
        order."""
        with self._writers, (self._writer if durable else self._progress_writer).begin() as conn:
            if not durable and conn.dialect.name == "postgresql":
                conn.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")
            try:
                yield conn
            finally:  # conn.info outlives the transaction (it is the pooled connection's)
                conn.info.pop(_CHAIN_HEAD, None)
                conn.info.pop(_APPEND_CHECK, None)

    def _transact(self, work: Callable[[Connection], Done], durable: bool = True) -> Done:
        """Run ``work`` in one transaction, retrying when a concurrent writer took the chain head first."""
        for _ in range(_APPEND_ATTEMPTS):
            try:
                with classified_errors(), self.writing(durable) as conn:
                    return work(conn)
            except (IntegrityError, LostRace) as error:
                lost_race = error  # another writer moved the chain head, the identity or the job: re-read, retry
        raise EvidenceError(
            ReasonCode.LEDGER_CONFLICT, "could not append to the audit ledger under contention"
        ) from lost_race

    def _transact_together(self, item: Item, work_all: Callable[[Connection, list[Item]], list[Done]]) -> Done:
        """``_transact`` for bursts of callers in this process: whoever gets the turn commits the work of every
        caller waiting by then in one transaction, so a burst pays one commit (one fsync) per turn instead of one
        per caller. ``work_all(conn, items)`` does the work of several callers' items and returns each one's result,
        in order: it can write them in a few statements for all. When that transaction fails, each caller's item
        runs in a transaction of its own, so that a caller sees only its own failure."""
        waiting = _Waiting(item, work_all)
        with self._waiting_mutex:
            self._waiting.append(waiting)
        with self._turn:
            if not waiting.done:
                with self._waiting_mutex:
                    batch, self._waiting = self._waiting, []
                try:
                    results = self._transact(lambda conn: _work_of_each(conn, batch))
                except Exception:  # each caller's item again, alone: a caller sees only its own failure
                    for each in batch:
                        each.settle_alone(self._transact)
                else:
                    for each, result in zip(batch, results):
                        each.result, each.done = result, True
        if waiting.error is not None:
            raise waiting.error
        return cast(Done, waiting.result)  # the result of work_all for this caller's item


def _unauthorized(body: dict[str, Any]) -> None:
    """An event outside the action gate: it may not claim a signed request (refusals keep theirs), which nothing
    would have checked before it was appended."""
    if "authorization" in body["details"] and body["event_type"] != EventType.ACTION_REFUSED:
        raise EvidenceError(
            ReasonCode.UNEXPECTED_ERROR,
            f"a {body['event_type']} event carries a signed request the action gate did not check",
        )


@dataclass
class _Waiting:
    item: Any
    work_all: Callable[[Connection, list[Any]], list[Any]]
    result: object = None
    error: Exception | None = None
    done: bool = False

    def settle_alone(self, transact: Callable[[Callable[[Connection], object]], object]) -> None:
        """This caller's item in a transaction of its own: its result, or its error for the caller to raise."""
        try:
            self.result = transact(lambda conn: self.work_all(conn, [self.item])[0])
        except Exception as error:  # delivered to the caller that asked, in its own thread
            self.error = error
        self.done = True


def _work_of_each(conn: Connection, batch: list[_Waiting]) -> list[object]:
    """The results of one turn's callers, in order: each run of consecutive callers with the same work_all is one
    call of it."""
    results: list[object] = []
    for work_all, group in itertools.groupby(batch, key=lambda each: each.work_all):
        results += work_all(conn, [each.item for each in group])
    return results


@dataclass(frozen=True)
class Claim:
    """The answer to a publication claim: granted (with the bundle to supersede), or held by another attempt."""

    claimed: bool
    head: PublicationRecord | None  # the tenant-month's current publication: the bundle a new one supersedes
    holder: PublicationClaim | None = None  # when not granted: the claim of the attempt that holds it
    holder_live: bool = False  # ... and whether that attempt's lease is still live


def _short(identity: object) -> str:
    return "nothing" if not identity else str(identity)[:12]


def _check_supersedes(seq: int, body: dict[str, Any], current: dict[tuple[str, str], str]) -> None:
    """The corrections chain is linear: a `bundle.published` event that names `supersedes` names the bundle
    published last for its tenant-month, so no two bundles supersede the same one. (A second bundle without
    `supersedes` was published before the link existed.)"""
    tenant_month = (body["tenant"], body["period"])
    supersedes = body["details"].get("supersedes")
    if supersedes is not None and (
        not isinstance(supersedes, dict) or supersedes.get("identity") != current.get(tenant_month)
    ):
        raise EvidenceError(
            ReasonCode.LEDGER_INVALID,
            f"audit event {seq} supersedes another bundle than the "
            "tenant-month's current one: the corrections chain forks",
        )
    current[tenant_month] = body["details"].get("identity")


def _head_revision() -> str | None:
    return ScriptDirectory.from_config(migration_config()).get_current_head()


def _sqlite_file(url: URL, database: str, read_only: bool) -> URL:
    """The ledger file, created owner-only (SQLite gives its -wal and -shm files the same mode); read-only
    opens it as an SQLite URI with mode=ro, so not even an empty file is touched."""
    path = Path(database).absolute()
    if read_only:
        if not path.is_file():
            raise EvidenceError(ReasonCode.LEDGER_NOT_FOUND, "the ledger database file does not exist")
        return url.set(database=f"file:{path.as_uri().removeprefix('file://')}?mode=ro", query={"uri": "true"})
    private_dirs(path.parent)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    os.chmod(path, 0o600)
    return url


# As many connections as a process uses at once, all kept: SQLAlchemy's default (5, and 10 more that it closes at
# check-in) made a burst of uploads open a connection per checkout past the fifth, on PostgreSQL a backend forked
# and authenticated each time (160 sessions for 600 uploads). The cap of 15 is the default's.
_POOL = {"pool_size": 15, "max_overflow": 0}


# A PostgreSQL server that accepts a connection and never answers would hold every caller: libpq gives up after
# this many seconds and the call is LEDGER_UNAVAILABLE (retried). A `?connect_timeout=` in EVIDENCE_LEDGER_URL wins.
CONNECT_TIMEOUT_SECONDS = 10


def _connect_arguments(url: URL, read_only: bool) -> dict[str, Any]:
    if url.get_backend_name() != "postgresql":
        return {}
    arguments: dict[str, Any] = {} if "connect_timeout" in url.query else {"connect_timeout": CONNECT_TIMEOUT_SECONDS}
    if read_only:
        arguments["options"] = "-c default_transaction_read_only=on"
    return {"connect_args": arguments} if arguments else {}
