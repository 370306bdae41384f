"""Who may do what: the roles, the privileged actions, and which roles permit each action.

The single source of truth for authorization and for the documentation's roles table (``roles_table``). Roles are
least privilege and do not nest: an admin manages identities and the service's signing keys and nothing else, so a
person who also operates the service holds both roles. An actor may hold any set of roles; an action is permitted
when one of them permits it. Four-eyes is not a role: it is checked between identities where an action approves
another actor's work (registry.require_other_identity).
"""

from __future__ import annotations

from enum import StrEnum

from evidence_pipeline.models import EventType


class Role(StrEnum):
    ADMIN = "admin"
    OPERATOR = "operator"
    APPROVER = "approver"
    REVIEWER = "reviewer"
    AUDITOR = "auditor"


class Action(StrEnum):
    """A privileged action: the value is what a signed request's ``action`` says."""

    ACTOR_BOOTSTRAP = "actor.bootstrap"  # the first admin, once, signed by its own new key
    ACTOR_REGISTER = "actor.register"
    ACTOR_ROLES = "actor.roles"
    ACTOR_KEY_ADD = "actor.key.add"
    ACTOR_KEY_REVOKE = "actor.key.revoke"
    KEYS_ROTATE = "keys.rotate"
    KEYS_REVOKE = "keys.revoke"
    JOB_REPLAY = "job.replay"
    TENANT_REGISTER = "tenant.register"
    TOKEN_ISSUE = "token.issue"
    TOKEN_REVOKE = "token.revoke"
    RULESET_CANARY = "ruleset.canary"
    RULESET_ROLLBACK = "ruleset.rollback"
    TENANT_OFFBOARD = "tenant.offboard"
    TENANT_OFFBOARD_APPROVE = "tenant.offboard.approve"
    TEMPLATE_SUBMIT = "template.submit"
    TEMPLATE_APPROVE = "template.approve"
    PART_DECIDE = "part.decide"
    JOBS_READ = "jobs.read"
    WEBHOOK_SET = "webhook.set"
    WEBHOOK_ROTATE = "webhook.rotate"
    WEBHOOK_REPLAY = "webhook.replay"
    SOURCE_PUBLISH = "source.publish"


ROLE_DESCRIPTIONS = {
    Role.ADMIN: "manages identities (actors, their roles and keys) and the service's signing keys",
    Role.OPERATOR: "runs the service: registers tenants, issues their API tokens and sets their webhooks, publishes "
    "source revisions, replays, ruleset canaries and rollbacks, asks for offboarding, submits "
    "templates, reads jobs",
    Role.APPROVER: "the second pair of eyes: approves templates and offboarding, decides on parts; never its own work",
    Role.REVIEWER: "decides on a document's parts",
    Role.AUDITOR: "reads jobs and dead letters; changes nothing",
}

ACTION_DESCRIPTIONS = {
    Action.ACTOR_BOOTSTRAP: "bootstrap the first admin (once per deployment, at install)",
    Action.ACTOR_REGISTER: "register an actor with its roles and first key",
    Action.ACTOR_ROLES: "change an actor's roles",
    Action.ACTOR_KEY_ADD: "add a key to an actor",
    Action.ACTOR_KEY_REVOKE: "revoke an actor's key",
    Action.KEYS_ROTATE: "rotate the service's signing keys",
    Action.KEYS_REVOKE: "revoke a generation of the service's signing keys",
    Action.JOB_REPLAY: "replay a dead or rejected job as a new attempt",
    Action.TENANT_REGISTER: "register tenants (each becomes a partition)",
    Action.TOKEN_ISSUE: "issue an API token to a tenant",
    Action.TOKEN_REVOKE: "revoke a tenant's API token",
    Action.RULESET_CANARY: "route tenants' contract reviews to a candidate ruleset",
    Action.RULESET_ROLLBACK: "stop routing tenants to the candidate ruleset",
    Action.TENANT_OFFBOARD: "ask for a tenant to be offboarded",
    Action.TENANT_OFFBOARD_APPROVE: "approve another actor's offboarding request",
    Action.TEMPLATE_SUBMIT: "submit a redaction template version",
    Action.TEMPLATE_APPROVE: "approve another actor's template version",
    Action.PART_DECIDE: "decide on a document's part (approve or reject)",
    Action.JOBS_READ: "list dead letters, jobs and their attempts",
    Action.WEBHOOK_SET: "set a tenant's webhook URL (a new secret, shown once)",
    Action.WEBHOOK_ROTATE: "rotate a tenant's webhook secret (the previous one signs too for a window)",
    Action.WEBHOOK_REPLAY: "send a dead webhook delivery again",
    Action.SOURCE_PUBLISH: "publish a tenant-month's source revision (`evidence source publish`)",
}

PERMISSIONS: dict[Role, frozenset[Action]] = {
    Role.ADMIN: frozenset(
        {
            Action.ACTOR_REGISTER,
            Action.ACTOR_ROLES,
            Action.ACTOR_KEY_ADD,
            Action.ACTOR_KEY_REVOKE,
            Action.KEYS_ROTATE,
            Action.KEYS_REVOKE,
        }
    ),
    Role.OPERATOR: frozenset(
        {
            Action.TENANT_REGISTER,
            Action.TOKEN_ISSUE,
            Action.TOKEN_REVOKE,
            Action.SOURCE_PUBLISH,
            Action.JOB_REPLAY,
            Action.RULESET_CANARY,
            Action.RULESET_ROLLBACK,
            Action.TENANT_OFFBOARD,
            Action.TEMPLATE_SUBMIT,
            Action.JOBS_READ,
            Action.WEBHOOK_SET,
            Action.WEBHOOK_ROTATE,
            Action.WEBHOOK_REPLAY,
        }
    ),
    Role.APPROVER: frozenset({Action.TEMPLATE_APPROVE, Action.TENANT_OFFBOARD_APPROVE, Action.PART_DECIDE}),
    Role.REVIEWER: frozenset({Action.PART_DECIDE}),
    Role.AUDITOR: frozenset({Action.JOBS_READ}),
}

# The event each action records, with its signed request in details["authorization"]: an offline audit checks that a
# stored request was signed for the event that carries it. Reads record nothing; the wiring of each command into the
# signed scheme adds its action here.
RECORDED_AS: dict[Action, EventType] = {
    Action.ACTOR_BOOTSTRAP: EventType.ACTOR_BOOTSTRAPPED,
    Action.ACTOR_REGISTER: EventType.ACTOR_REGISTERED,
    Action.ACTOR_ROLES: EventType.ACTOR_ROLES_CHANGED,
    Action.ACTOR_KEY_ADD: EventType.ACTOR_KEY_ADDED,
    Action.ACTOR_KEY_REVOKE: EventType.ACTOR_KEY_REVOKED,
    Action.TENANT_REGISTER: EventType.TENANT_REGISTERED,
    Action.TOKEN_ISSUE: EventType.TOKEN_ISSUED,
    Action.TOKEN_REVOKE: EventType.TOKEN_REVOKED,
    Action.JOB_REPLAY: EventType.JOB_REPLAYED,
    Action.RULESET_CANARY: EventType.RULESET_CANARY,
    Action.RULESET_ROLLBACK: EventType.RULESET_ROLLED_BACK,
    Action.TEMPLATE_SUBMIT: EventType.TEMPLATE_SUBMITTED,
    Action.TEMPLATE_APPROVE: EventType.TEMPLATE_APPROVED,
    Action.TENANT_OFFBOARD: EventType.TENANT_OFFBOARD_REQUESTED,
    Action.TENANT_OFFBOARD_APPROVE: EventType.TENANT_OFFBOARDED,
    Action.PART_DECIDE: EventType.PART_DECIDED,
    Action.KEYS_ROTATE: EventType.KEYS_ROTATED,
    Action.KEYS_REVOKE: EventType.KEYS_REVOKED,
    Action.WEBHOOK_SET: EventType.WEBHOOK_CONFIGURED,
    Action.WEBHOOK_ROTATE: EventType.WEBHOOK_ROTATED,
    Action.WEBHOOK_REPLAY: EventType.WEBHOOK_REPLAYED,
    Action.SOURCE_PUBLISH: EventType.SOURCE_PUBLISHED,
}
# Actions that record one event per tenant they name, all in one transaction and each carrying the same signed
# request: offline, one request may authorize a run of consecutive events of its type, one per tenant.
PER_TENANT_ACTIONS = frozenset({Action.TENANT_REGISTER, Action.RULESET_CANARY, Action.RULESET_ROLLBACK})
ACTION_OF_EVENT: dict[str, Action] = {str(event): action for action, event in RECORDED_AS.items()}


def permits(roles: frozenset[str], action: str) -> bool:
    return any(action in PERMISSIONS.get(role, ()) for role in roles)


def roles_table() -> str:
    """The roles table of the documentation (Markdown), generated from PERMISSIONS."""
    roles = list(Role)
    lines = ["| action | what it does | " + " | ".join(roles) + " |", "| --- | --- |" + " :-: |" * len(roles)]
    for action in Action:
        marks = " | ".join("yes" if action in PERMISSIONS[role] else "" for role in roles)
        lines.append(f"| `{action}` | {ACTION_DESCRIPTIONS[action]} | {marks} |")
    lines += ["", "| role | what it is for |", "| --- | --- |"]
    lines += [f"| `{role}` | {ROLE_DESCRIPTIONS[role]} |" for role in roles]
    return "\n".join(lines) + "\n"
