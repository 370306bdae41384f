"""Replaying a dead or rejected job, as an operator's signed action (`job.replay`, args {job_id, reason} and,
optionally, the policy_version the new attempt must run under): the action gate verifies the request and the job is
reopened in the transaction of its `job.replayed` event, which stores the request. The CLI's `evidence replay` and
any other front end call this one function."""

from __future__ import annotations

from sqlalchemy import Connection

from evidence_pipeline.actors.authorize import ActionGate
from evidence_pipeline.actors.registry import Registry
from evidence_pipeline.actors.roles import Action
from evidence_pipeline.actors.verify import AuthorizedAction
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger.rows import Job
from evidence_pipeline.models import LedgerEvent


def replay_job(gate: ActionGate, envelope: object) -> Job:
    """The job the signed request reopened (its row after the replay)."""
    reopened: list[Job] = []

    def perform(conn: Connection, _registry: Registry, authorized: AuthorizedAction) -> LedgerEvent:
        args = authorized.args
        if not {"job_id", "reason"} <= args.keys() <= {"job_id", "reason", "policy_version"} or not all(
            isinstance(value, str) and value for value in args.values()
        ):
            raise EvidenceError(
                ReasonCode.ACTION_REQUEST_INVALID, "job.replay takes {job_id, reason[, policy_version]}"
            )
        job, event = gate.ledger.replay(
            conn,
            args["job_id"],
            requested_by=authorized.actor,
            reason=args["reason"],
            authorization=authorized.envelope,
            policy_version=args.get("policy_version"),
        )
        reopened.append(job)
        return event

    gate.run(envelope, Action.JOB_REPLAY, perform)
    return reopened[0]
