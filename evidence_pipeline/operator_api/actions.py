"""What each operator API operation does, without HTTP: it hands the signed request to the domain function the
command line calls (the same ActionGate), and shapes its answer as the API returns it.

A read (`jobs.read`) passes the gate like any action, so its actor, key, role and age are checked and a refusal is
recorded, but it records nothing when it is allowed and leaves its nonce unused: the same signed read may be sent
again within EVIDENCE_ACTION_MAX_AGE_SECONDS, and no later.
"""

from __future__ import annotations

import time
from datetime import datetime

from sqlalchemy import Connection

from evidence_pipeline.actors.authorize import ActionGate
from evidence_pipeline.actors.registry import Registry
from evidence_pipeline.actors.roles import Action
from evidence_pipeline.actors.verify import AuthorizedAction
from evidence_pipeline.documents import decisions, templates
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import TENANT_ID
from evidence_pipeline.operations.dead_letters import KINDS, DeadLetterFilter, dead_letters, replayed
from evidence_pipeline.operations.replay import replay_job
from evidence_pipeline.runtime import Runtime

READ_FILTERS = ("tenant", "kinds", "codes", "older_than_seconds", "since")


def list_dead_letters(runtime: Runtime, gate: ActionGate, envelope: object) -> list[dict]:
    """`evidence dead-letter list --json`, filtered by the signed request's args (READ_FILTERS, each optional)."""
    which: list[DeadLetterFilter] = []

    def perform(_conn: Connection, _registry: Registry, authorized: AuthorizedAction) -> None:
        which.append(dead_letter_filter(authorized.args, time.time()))

    gate.run(envelope, Action.JOBS_READ, perform)
    return dead_letters(runtime, which[0])


def dead_letter_filter(args: dict, now: float) -> DeadLetterFilter:
    """The filter the args of a `jobs.read` request name (the options of `dead-letter list`); ``now`` for the age."""
    tenant, kinds, codes = args.get("tenant"), args.get("kinds", []), args.get("codes", [])
    older_than, since = args.get("older_than_seconds"), args.get("since")
    valid = (
        args.keys() <= set(READ_FILTERS)
        and (tenant is None or isinstance(tenant, str) and TENANT_ID.fullmatch(tenant))
        and _strings(kinds)
        and set(kinds) <= set(KINDS)
        and _strings(codes)
        and (older_than is None or type(older_than) is int and older_than >= 0)
        and (since is None or _moment(since) is not None)
    )
    if not valid:
        raise EvidenceError(
            ReasonCode.ACTION_REQUEST_INVALID,
            "jobs.read takes {tenant, kinds, codes, older_than_seconds, since}, each optional: a "
            f"tenant id, kinds of {', '.join(KINDS)}, reason codes, whole seconds, an ISO 8601 "
            "time with its offset",
        )
    return DeadLetterFilter(
        tenant,
        tuple(kinds),
        tuple(codes),
        None if older_than is None else now - older_than,
        None if since is None else _moment(since).timestamp(),
    )


def replay(runtime: Runtime, gate: ActionGate, envelope: object) -> dict:
    """`evidence replay`: the new attempt, the ended one it replays, and what runs it next."""
    job = replay_job(gate, envelope)
    return {
        "job_id": job.job_id,
        "attempt_id": job.attempt_id,
        "replay_of": job.replay_of,
        "tenant": job.tenant,
        "period": job.period,
        "state": job.state,
        "next_step": replayed(runtime, job.job_id),
    }


def submit_template(gate: ActionGate, envelope: object, organization: object, program: object) -> tuple[dict, bool]:
    """`evidence template submit`: the templates are the files' JSON text, as the command line reads them."""
    version, created = templates.submit(
        gate, envelope, _template_bytes(organization, "organization"), _template_bytes(program, "program")
    )
    return version_view(version), created


def approve_template(gate: ActionGate, envelope: object) -> tuple[dict, bool]:
    version, created = templates.approve(gate, envelope)
    return version_view(version), created


def decide_part(rt: Runtime, gate: ActionGate, envelope: object) -> dict:
    """`evidence part decide`: the recorded decision (its event's details)."""
    return decisions.decide_part(gate, rt, envelope)


def version_view(version: dict) -> dict:
    """A template version as `evidence template … --json` prints it: without its merged rules."""
    return {name: value for name, value in version.items() if name != "template"}


def _template_bytes(text: object, kind: str) -> bytes:
    if not isinstance(text, str):
        raise EvidenceError(ReasonCode.REQUEST_INVALID, f"{kind} is the {kind} template's JSON text, a string")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise EvidenceError(ReasonCode.REQUEST_TEXT_INVALID, f"{kind} holds a lone surrogate") from None


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) and item for item in value)


def _moment(text: object) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return moment if moment is not None and moment.tzinfo is not None else None
