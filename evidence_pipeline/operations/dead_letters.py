"""Dead letters: the jobs that failed and wait for an operator, with the next step for each kind of job.

A failure is a dead job (its retry budget spent) or a job rejected by a terminal failure (a code that is not a
decision: the store read-only, a source that does not validate, an evidence run that failed). A decision about the
input (the gate refused it, a ruleset rejected the contract: the codes of documents.registry.outcome_codes) is the
job's outcome, not a dead letter: it is listed with the tenant's job and in the ledger (`job.rejected`), never here.
"""

from __future__ import annotations

from dataclasses import dataclass

from evidence_pipeline.canonical import utc_iso
from evidence_pipeline.documents.registry import outcome_codes
from evidence_pipeline.ledger import job_states as states
from evidence_pipeline.ledger.document_jobs import EVIDENCE
from evidence_pipeline.ledger.rows import ListedJob
from evidence_pipeline.runtime import Runtime

TENANT_MONTH, EVIDENCE_REQUEST, DOCUMENT = "tenant-month", "evidence-request", "document"
KINDS = (TENANT_MONTH, EVIDENCE_REQUEST, DOCUMENT)


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters to list; None (or empty) lets every one through. Ages compare with when the job's
    current attempt ended (seconds since the epoch)."""

    tenant: str | None = None
    kinds: tuple[str, ...] = ()
    codes: tuple[str, ...] = ()
    ended_before: float | None = None  # --older-than
    ended_after: float | None = None  # --since

    def admits(self, letter: dict) -> bool:
        return (
            (self.tenant is None or letter["tenant"] == self.tenant)
            and (not self.kinds or letter["kind"] in self.kinds)
            and (not self.codes or letter["reason"] in self.codes)
            and (self.ended_before is None or letter["ended"] < self.ended_before)
            and (self.ended_after is None or letter["ended"] >= self.ended_after)
        )


def kind_of(fidelity: str, operation: str | None) -> str:
    """A tenant-month's own job (the monthly pipeline's), a tenant's request for a month's bundle, or a document
    operation: by the job's fidelity and its document operation."""
    if fidelity != states.DOCUMENT:
        return TENANT_MONTH
    return EVIDENCE_REQUEST if operation == EVIDENCE else DOCUMENT


def is_failure(job: ListedJob) -> bool:
    return job.state == states.DEAD or job.last_reason not in outcome_codes()


def after_replay(job: ListedJob) -> str:
    """What runs a replayed job, by its kind: what the code does once `evidence replay` accepted it, nothing more."""
    kind = kind_of(job.fidelity, job.operation)
    if kind == DOCUMENT:
        return "document_dispatch_sensor requests a run of its page on its next tick (a document is not a partition)"
    if kind == EVIDENCE_REQUEST:
        return "document_dispatch_sensor launches a monthly_evidence run of the requested month and records its end"
    return (
        f"tenant_month_retry_sensor requests a monthly_evidence run of partition {job.period}-01|"
        f"{job.tenant} on its next tick"
    )


def replayed(runtime: Runtime, job_id: str) -> str:
    """after_replay of the job ``job_id``."""
    return after_replay(runtime.ledger.listed_jobs(job_id=job_id)[0])


def _letter(job: ListedJob) -> dict:
    return {
        "job_id": job.job_id,
        "attempt_id": job.current_attempt_id,
        "kind": kind_of(job.fidelity, job.operation),
        "tenant": job.tenant,
        "period": job.period,
        "operation": job.operation,
        "state": job.state,
        "reason": job.last_reason,
        "message": job.last_message,
        "tries": job.attempts,
        "ended": job.updated_at,
        # --key: a replay is an operator's signed action (or EVIDENCE_ACTOR_KEY names the key)
        "next_step": f"evidence replay {job.job_id} --reason TEXT --key FILE; then {after_replay(job)}",
    }


def dead_letters(runtime: Runtime, which: DeadLetterFilter = DeadLetterFilter()) -> list[dict]:
    """The failed jobs ``which`` admits, oldest ending first, each with its kind and next step."""
    letters = []
    for job in runtime.ledger.listed_jobs():
        if not is_failure(job):
            continue
        letter = _letter(job)
        if which.admits(letter):
            ended = letter.pop("ended")
            letters.append(letter | {"ended_at": utc_iso(ended)})
    return letters
