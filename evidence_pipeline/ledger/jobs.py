"""Job records: the application-owned state of one tenant-month identity.

    accepted --lease--> running --commit--> succeeded
       ^                   |  \\--terminal failure--> rejected
       |                   \\--transient failure, budget left--> accepted (retried)
       |                        transient failure, budget spent (attempts AND time)--> dead
       +----- replay (who, why) ------ rejected | dead   (a new attempt; the ended one is kept as it ended)

A job is its identity and immutable input; an attempt is disposable. `replay` keeps the ended attempt, frozen, in
`evidence_job_attempts` (migration 0011) and gives the job's row a new attempt (its own id, linked by replay_of),
so everything that finds work by the job's id (dispatch pages, evidence runs, the tenant-month pipeline) picks the
replayed job up as before.

Every transition is one compare-and-swap UPDATE. Leases carry a token that only grows; the commit that makes a
bundle visible succeeds only while the committing attempt still holds the newest, unexpired lease.

Over 400 lines because every transition of the state machine above is one compare-and-swap here, and reading
them side by side is how their guards are checked against each other."""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, Select, Table, Update, bindparam, select

from evidence_pipeline.canonical import legacy_ascii_json_for_ids, utc_iso
from evidence_pipeline.errors import EvidenceError, ReasonCode, meaning_of
from evidence_pipeline.ledger import announcements
from evidence_pipeline.ledger.db import Done, LostRace, classified_errors
from evidence_pipeline.ledger.job_states import (
    ACCEPTED,
    CLOSED,
    DEAD,
    DOCUMENT,
    FAILED_AS,
    REJECTED,
    RUNNING,
    SUCCEEDED,
    RetryBudget,
    lease_live,
    lease_live_clause,
)
from evidence_pipeline.ledger.rows import Job, JobAttempt, ListedJob
from evidence_pipeline.models import Deployment, EventType, LedgerEvent, TenantMonth

MESSAGE_CHARS = 500  # a failure's message as the job keeps it (evidence_jobs.last_message, migration 0009)


def failure_message(reason: str, message: str | None) -> str:
    """What a job's failure or rejection says beside its code, as the job keeps it: ``message``, or else what the
    code means, so a tenant always reads why."""
    return (message or meaning_of(reason))[:MESSAGE_CHARS]


def document_job_id(tenant: str, idempotency_key: str, batch_id: str = "") -> str:
    """A document job's id: its tenant's idempotency key (within its batch), so identical requests meet on one row."""
    scope = {"tenant": tenant, "idempotency_key": idempotency_key} | ({"batch_id": batch_id} if batch_id else {})
    return hashlib.sha256(legacy_ascii_json_for_ids(scope)).hexdigest()


def replay_attempt_id(job_id: str, replay_of: str) -> str:
    """The id of the attempt that replays ``replay_of``: deterministic, so two replays of one ended attempt meet on
    one id (and the attempts table's primary key), and different from every job id (those hash other fields)."""
    return hashlib.sha256(legacy_ascii_json_for_ids({"job_id": job_id, "replay_of": replay_of})).hexdigest()


@dataclass(frozen=True)
class JobKey:
    tenant: str
    period: str
    source_sha256: str
    renderer_version: str
    policy_version: str
    fidelity: str = "archive"

    @property
    def job_id(self) -> str:
        return hashlib.sha256(legacy_ascii_json_for_ids(self.__dict__)).hexdigest()


@dataclass(frozen=True)
class Lease:
    job_id: str
    token: int
    owner: str
    expires_at: float


class _Append(Protocol):
    """Ledger._append: one event appended to the chain within ``conn``'s transaction."""

    def __call__(
        self,
        conn: Connection,
        tenant_month: TenantMonth | Deployment,
        event_type: str,
        subject_sha256: str,
        *,
        actor: str,
        details: dict[str, Any],
    ) -> LedgerEvent: ...


class _Transact(Protocol):
    """Ledger._transact: ``work`` in one transaction, and what it returns."""

    def __call__(self, work: Callable[[Connection], Done], durable: bool = ...) -> Done: ...


class JobTransitions:
    """The job state machine and its fenced leases, as methods of the Ledger: every transition is one
    compare-and-swap, committed with its audit event in one transaction (``_transact``, ``_append``)."""

    # What the Ledger (ledger.py) gives these methods, declared so that their use is type-checked.
    engine: Engine
    jobs: Table
    ended_attempts: Table
    document_jobs: Table
    batches: Table
    _append: _Append
    _transact: _Transact
    writing: Callable[..., contextlib.AbstractContextManager[Connection]]

    def accept_job(self, key: JobKey, actor: str) -> Job:
        """The job record of an identity, created (state accepted) on first sight."""
        now = time.time()

        def accept(conn: Connection) -> Job:
            existing = self._job(conn, key.job_id)
            if existing is not None:
                return existing
            conn.execute(
                self.jobs.insert().values(
                    job_id=key.job_id,
                    **key.__dict__,
                    state=ACCEPTED,
                    attempts=0,
                    lease_token=0,
                    budget_started_at=now,
                    created_at=now,
                    updated_at=now,
                )
            )
            self._append(
                conn,
                TenantMonth(key.tenant, key.period),
                EventType.JOB_ACCEPTED,
                key.source_sha256,
                actor=actor,
                details={"job_id": key.job_id, "fidelity": key.fidelity},
            )
            return self._existing_job(conn, key.job_id)

        return self._transact(accept)

    def job(self, job_id: str) -> Job:
        with classified_errors(), self.engine.connect() as conn:
            return self._existing_job(conn, job_id)

    def acquire_lease(
        self, job_id: str, owner: str, ttl_seconds: float, then: Callable[[Connection, Lease], None] | None = None
    ) -> Lease | None:
        """Start an attempt: a new lease with the next token, or None when the job already succeeded. ``then``
        runs in the same transaction once the lease is taken: what the attempt records as it starts costs no
        commit of its own."""

        def acquire(conn: Connection) -> Lease | None:
            job = self._existing_job(conn, job_id)
            now = time.time()
            if job.state == SUCCEEDED:
                return None
            if job.state in CLOSED:
                raise EvidenceError(ReasonCode.JOB_CLOSED, f"job {job_id[:12]} is {job.state}; replay it to try again")
            if job.state == RUNNING and lease_live(job.lease_expires_at, now):
                raise EvidenceError(ReasonCode.LEASE_BUSY, f"job {job_id[:12]} is leased by another attempt")
            if job.state == ACCEPTED and (job.next_attempt_at or 0) > now:
                raise EvidenceError(ReasonCode.RETRY_NOT_DUE, f"job {job_id[:12]} waits to be retried")
            lease = Lease(job_id, job.lease_token + 1, owner, now + ttl_seconds)
            self._swap(
                conn,
                job,
                state=RUNNING,
                lease_token=lease.token,
                lease_owner=owner,
                lease_expires_at=lease.expires_at,
                attempts=job.attempts + 1,
                next_attempt_at=None,
            )
            self._append(
                conn,
                self._tenant_month(job),
                EventType.JOB_RUNNING,
                job.source_sha256,
                actor=owner,
                details={"job_id": job_id, "lease_token": lease.token, "attempt": job.attempts + 1},
            )
            if then is not None:
                then(conn, lease)
            return lease

        return self._transact(acquire)

    def renew_lease(self, lease: Lease, ttl_seconds: float) -> Lease:
        renewed = Lease(lease.job_id, lease.token, lease.owner, time.time() + ttl_seconds)
        with classified_errors(), self.writing() as conn:
            held = self._update_held(conn, lease, lease_expires_at=renewed.expires_at)
        if not held:
            raise EvidenceError(ReasonCode.LEASE_FENCED, f"lease {lease.token} of job {lease.job_id[:12]} was lost")
        return renewed

    @contextlib.contextmanager
    def keep_alive(self, lease: Lease, ttl_seconds: float) -> Iterator[None]:
        """Renew ``lease`` every third of its lifetime while the block runs. A renewal fenced out means the lease
        was lost: the heartbeat stops and the attempt's commit will be fenced. A renewal the database could not take
        (an outage, a lock held past its wait) is tried again at the next beat: the lease is still the attempt's
        until it expires."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(ttl_seconds / 3):
                try:
                    self.renew_lease(lease, ttl_seconds)
                except EvidenceError as error:
                    if error.code == ReasonCode.LEASE_FENCED:
                        return

        heart = threading.Thread(target=beat, name=f"lease-{lease.token}", daemon=True)
        heart.start()
        try:
            yield
        finally:
            stop.set()
            heart.join()

    def lease_is_live(self, job_id: str, token: int) -> bool:
        with classified_errors(), self.engine.connect() as conn:
            return self._lease_live(conn, job_id, token)

    def _lease_live(self, conn: Connection, job_id: str, token: int) -> bool:
        """Whether lease ``token`` is the job's newest and still live (the check ``_update_held`` fences with)."""
        job = self._job(conn, job_id)
        return bool(
            job and job.state == RUNNING and job.lease_token == token and lease_live(job.lease_expires_at, time.time())
        )

    def record_failure(
        self,
        job_id: str,
        reason: str,
        *,
        retryable: bool,
        actor: str,
        budget: RetryBudget,
        attempt: int | None,
        lease_token: int | None = None,
        message: str | None = None,
    ) -> str | None:
        """Classify a failed attempt; returns the job's new state (accepted = retry, rejected, dead). A retry
        waits until the budget's next_attempt_at, persisted on the job and named in its event. ``message`` (an
        EvidenceError's: codes and counts, never a value) is kept on the job and in the event beside the code.
        ``attempt`` None: a try that took no lease (it failed before publishing) counts as one more attempt.

        Returns None when the failure must not move the job: lease contention, a lost lease or a job whose retry is
        not due, a job whose live lease another attempt holds, or a job that already succeeded or is closed. Fenced
        like every transition.
        """
        if reason in (ReasonCode.LEASE_BUSY, ReasonCode.LEASE_FENCED, ReasonCode.RETRY_NOT_DUE):
            return None

        def fail(conn: Connection) -> str | None:
            job = self._job(conn, job_id)
            if job is None or job.state in (SUCCEEDED, *CLOSED):
                return None
            live = job.state == RUNNING and lease_live(job.lease_expires_at, time.time())
            if live and job.lease_token != lease_token:
                return None  # someone else's attempt is in progress: this failure is not the job's
            tries = job.attempts + 1 if attempt is None else max(job.attempts, attempt)
            return self._fail(
                conn, job, reason, retryable=retryable, actor=actor, budget=budget, attempts=tries, message=message
            )

        return self._transact(fail)

    def record_lost_attempt(self, job_id: str, lease_token: int, actor: str, budget: RetryBudget) -> str | None:
        """The attempt that took lease ``lease_token`` died without a word (its process was killed, aborted or ran
        out of memory): once that lease has expired, it is a failed attempt (WORKER_LOST), counted when the lease
        was taken, before its work began. Returns the job's new state (accepted = retry_wait, or dead), or None
        when that lease is live or no longer the job's."""

        def lost(conn: Connection) -> str | None:
            job = self._job(conn, job_id)
            if (
                job is None
                or job.state != RUNNING
                or job.lease_token != lease_token
                or lease_live(job.lease_expires_at, time.time())
            ):
                return None
            return self._fail(
                conn,
                job,
                ReasonCode.WORKER_LOST,
                retryable=True,
                actor=actor,
                budget=budget,
                attempts=job.attempts,
                message=f"the worker of attempt {job.attempts} died before it recorded an outcome",
            )

        return self._transact(lost)

    def _fail(
        self,
        conn: Connection,
        job: Job,
        reason: str,
        *,
        retryable: bool,
        actor: str,
        budget: RetryBudget,
        attempts: int,
        message: str | None,
    ) -> str:
        now = time.time()
        state = (
            REJECTED
            if not retryable
            else (DEAD if budget.exhausted(attempts, now - job.budget_started_at) else ACCEPTED)
        )
        retry_at = budget.next_attempt_at(attempts, now) if state == ACCEPTED else None
        message = failure_message(reason, message)
        self._swap(
            conn,
            job,
            state=state,
            attempts=attempts,
            last_reason=str(reason),
            last_message=message,
            lease_expires_at=None,
            next_attempt_at=retry_at,
        )
        event = self._append(
            conn,
            self._tenant_month(job),
            FAILED_AS[state],
            job.source_sha256,
            actor=actor,
            details={"job_id": job.job_id, "reason": reason, "attempt": attempts, "message": message}
            | ({"next_attempt_at": utc_iso(retry_at)} if retry_at else {}),
        )
        if state != ACCEPTED and job.fidelity == DOCUMENT:  # announced in the transaction of its event
            announcements.job_ended(conn, self, job.job_id, state=state, reason=str(reason), event=event)
        return state

    def replay(
        self,
        conn: Connection,
        job_id: str,
        *,
        requested_by: str,
        reason: str,
        authorization: dict[str, Any],
        policy_version: str | None = None,
    ) -> tuple[Job, LedgerEvent]:
        """Open a new attempt of a rejected or dead job, on the same immutable input under its pinned policy
        (``policy_version``, when the request names one, must be that one: REPLAY_POLICY_MISMATCH otherwise).

        In the caller's transaction (the action gate's): ``authorization`` is the signed request, stored with the
        `job.replayed` event. The ended attempt is kept as it ended (an `evidence_job_attempts` row, never changed)
        and named by that event with the new attempt's id. The job's row now carries the new attempt: accepted, a
        fresh budget, no reason yet, its lease token still growing. One live attempt at a time: a job whose current
        attempt has not ended (replayed already, working, or succeeded) is JOB_CLOSED, naming that attempt.
        Returns the job and the event."""
        job = self._existing_job(conn, job_id)
        ended = job.current_attempt_id
        if job.state not in CLOSED:
            raise EvidenceError(
                ReasonCode.JOB_CLOSED,
                f"job {job_id[:12]} is {job.state}, not rejected or "
                f"dead: its current attempt {ended[:12]} has not ended",
            )
        if policy_version is not None and policy_version != job.policy_version:
            raise EvidenceError(
                ReasonCode.REPLAY_POLICY_MISMATCH, f"job {job_id[:12]} was pinned to policy {job.policy_version}"
            )
        attempt = replay_attempt_id(job_id, ended)
        now = time.time()
        event = self._append(
            conn,
            self._tenant_month(job),
            EventType.JOB_REPLAYED,
            job.source_sha256,
            actor=requested_by,
            details={
                "job_id": job_id,
                "reason": reason,
                "attempt_id": attempt,
                "replay_of": ended,
                "policy_version": job.policy_version,
                "previous_state": job.state,
                "previous_reason": job.last_reason,
                "authorization": authorization,
            },
        )
        conn.execute(
            self.ended_attempts.insert().values(
                attempt_id=ended,
                job_id=job_id,
                replay_of=job.replay_of,
                input_sha256=job.source_sha256,
                policy_version=job.policy_version,
                state=job.state,
                reason=job.last_reason,
                message=job.last_message,
                tries=job.attempts,
                opened_at=job.budget_started_at,
                ended_at=job.updated_at,
                replayed_by=attempt,
                replay_seq=event.seq,
            )
        )
        self._swap(
            conn,
            job,
            state=ACCEPTED,
            attempts=0,
            budget_started_at=now,  # a fresh budget
            next_attempt_at=None,
            last_reason=None,
            last_message=None,
            attempt_id=attempt,
            replay_of=ended,
        )
        # A document job's status shows its current attempt: not finished, no outputs yet.
        conn.execute(
            self.document_jobs.update()
            .where(self.document_jobs.c.job_id == job_id)
            .values(finished_at=None, outputs=None)
        )
        return self._existing_job(conn, job_id), event

    def job_attempts(self, job_id: str) -> list[JobAttempt]:
        """Every attempt of a job, the first first: the ended ones a replay kept, then the current one (from the
        job's row)."""
        with classified_errors(), self.engine.connect() as conn:
            job = self._existing_job(conn, job_id)
            ended = conn.execute(
                select(self.ended_attempts)
                .where(self.ended_attempts.c.job_id == job_id)
                .order_by(self.ended_attempts.c.replay_seq)
            ).all()
        current = JobAttempt(
            attempt_id=job.current_attempt_id,
            replay_of=job.replay_of,
            state=job.state,
            reason=job.last_reason,
            message=job.last_message,
            tries=job.attempts,
            policy_version=job.policy_version,
            opened_at=job.budget_started_at,
            ended_at=job.updated_at if job.state in (SUCCEEDED, *CLOSED) else None,
        )
        return [JobAttempt.of(row) for row in ended] + [current]

    def jobs_in(self, *job_states: str) -> list[Job]:
        with classified_errors(), self.engine.connect() as conn:
            query = select(self.jobs).where(self.jobs.c.state.in_(job_states)).order_by(self.jobs.c.updated_at)
            return [Job.of(row) for row in conn.execute(query)]

    def listed_jobs(self, job_states: tuple[str, ...] = CLOSED, job_id: str | None = None) -> list[ListedJob]:
        """The jobs in ``job_states`` (rejected or dead: what dead letters are chosen from), or only ``job_id``,
        oldest change first, with their document operation (None for a tenant-month job)."""
        jobs, docs = self.jobs.c, self.document_jobs.c
        query = (
            select(self.jobs, docs.operation)
            .outerjoin(self.document_jobs, docs.job_id == jobs.job_id)
            .where(jobs.state.in_(job_states) if job_id is None else jobs.job_id == job_id)
            .order_by(jobs.updated_at)
        )
        with classified_errors(), self.engine.connect() as conn:
            return [ListedJob.of(row) for row in conn.execute(query)]

    def _job(self, conn: Connection, job_id: str) -> Job | None:
        row = conn.execute(self._job_query, {"job_id": job_id}).first()
        return None if row is None else Job.of(row)

    def _existing_job(self, conn: Connection, job_id: str) -> Job:
        job = self._job(conn, job_id)
        if job is None:
            raise EvidenceError(ReasonCode.JOB_NOT_FOUND, f"no job {job_id[:12]}")
        return job

    # Every attempt runs these statements several times: built once, with parameters, they cost no statement
    # construction per call (the WHERE parameters are named apart from the columns an UPDATE sets).
    @cached_property
    def _job_query(self) -> Select[*tuple[Any, ...]]:
        return select(self.jobs).where(self.jobs.c.job_id == bindparam("job_id"))

    @cached_property
    def _held_update(self) -> Update:
        jobs = self.jobs.c
        return self.jobs.update().where(
            jobs.job_id == bindparam("held_job_id"),
            jobs.lease_token == bindparam("held_token"),
            jobs.state == RUNNING,
            lease_live_clause(jobs.lease_expires_at, bindparam("held_now")),
        )

    @cached_property
    def _swap_update(self) -> Update:
        jobs = self.jobs.c
        return self.jobs.update().where(
            jobs.job_id == bindparam("seen_job_id"),
            jobs.state == bindparam("seen_state"),
            jobs.lease_token == bindparam("seen_token"),
            jobs.updated_at == bindparam("seen_updated_at"),
        )

    @staticmethod
    def _tenant_month(job: Job) -> TenantMonth:
        return TenantMonth(job.tenant, job.period)

    def _update_held(self, conn: Connection, lease: Lease, **values: Any) -> bool:
        """Set ``values`` on the job only while ``lease`` is its newest, unexpired lease (the fence); whether it
        was."""
        now = time.time()
        fence = {"held_job_id": lease.job_id, "held_token": lease.token, "held_now": now}
        return conn.execute(self._held_update, fence | values | {"updated_at": now}).rowcount > 0

    def _swap(self, conn: Connection, seen: Job, **values: Any) -> None:
        """Compare-and-swap: apply ``values`` only if the job is still exactly as it was read."""
        expected = {
            "seen_job_id": seen.job_id,
            "seen_state": seen.state,
            "seen_token": seen.lease_token,
            "seen_updated_at": seen.updated_at,
        }
        if not conn.execute(self._swap_update, expected | values | {"updated_at": time.time()}).rowcount:
            raise LostRace()
