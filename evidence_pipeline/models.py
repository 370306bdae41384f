"""Plain, frozen value types shared by every stage."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta, timezone
from enum import StrEnum

from evidence_pipeline.errors import EvidenceError, ReasonCode, Vocabulary


class EventType(Vocabulary):
    """The audit ledger's event types, each with what it records: the value is what the hashed event body holds.
    The reference page of event types is generated from this enum."""

    SOURCE_PINNED = (
        "source.pinned",
        "a tenant-month's source revision pinned by its digest, with its sequence, lane and document outcomes' digest",
    )
    SOURCE_PUBLISHED = (
        "source.published",
        "a tenant-month's source revision published, once per digest: its sequence, bytes, rows, who published it "
        "(an operator's signed request, or a tenant's token id) and the correlation id of the request",
    )
    REPORT_RENDERED = "report.rendered", "an unsigned report rendered and staged, content-addressed"
    REPORT_VALIDATED = "report.validated", "a report passed the gate for its pinned revision and document outcomes"
    REPORT_REJECTED = "report.rejected", "a report failed the validation gate"
    BUNDLE_PUBLISHED = (
        "bundle.published",
        "a bundle committed with its publication row and its job's success; the manifest is derived from it",
    )
    BUNDLE_TIMESTAMP_RENEWED = (
        "bundle.timestamp_renewed",
        "a B-LTA bundle's report renewed with a new document time stamp, as a new object beside the old: the "
        "bundle, the previous and the renewed report (key, sha256), the new stamp's time, the TSA certificates' expiry",
    )
    STAGES_TIMED = "stages.timed", "the stage clocks of an attempt that published or converged (`evidence stats`)"
    JOB_ACCEPTED = "job.accepted", "a job accepted (or returned to accepted, with its `next_attempt_at`)"
    JOB_RUNNING = "job.running", "an attempt took the job's lease"
    JOB_REJECTED = "job.rejected", "the job ended terminally, with its reason code and message"
    JOB_DEAD = "job.dead", "the job's retry budget was spent"
    JOB_REPLAYED = (
        "job.replayed",
        "`evidence replay` opened a new attempt of a rejected or dead job: who asked and why, the new attempt's id "
        "(attempt_id) and the ended one it replays (replay_of), kept as it ended",
    )
    JOB_IDEMPOTENCY_CONFLICT = (
        "job.idempotency_conflict",
        "an idempotency key came back with another request digest (both digests, nothing else)",
    )
    TOKEN_ISSUED = "token.issued", "a tenant's API token issued: its id, never the token"
    TOKEN_REVOKED = "token.revoked", "a tenant's API token revoked"
    DOCUMENT_ADMITTED = "document.admitted", "an upload stored, content-addressed, in the document store"
    DOCUMENT_PUBLISHED = "document.published", "a document job's outputs published, committed with its outcome"
    DOCUMENT_STAGE = "document.stage", "a staged job moved from one stage to the next, under its lease"
    SIGNATURE_CHECKED = (
        "signature.checked",
        "a document's embedded signatures checked under a trust policy, once per document and policy",
    )
    DOCUMENT_DERIVED = "document.derived", "a derivative (split part, merge) published with its lineage, once"
    EVIDENCE_DELIVERED = "evidence.delivered", "an evidence job's bundle recorded on the job"
    DOCUMENTS_CLOSED = "documents.closed", "a tenant-month's document outcomes were pinned at month close"
    BATCH_ACCEPTED = "batch.accepted", "a batch's manifest stored and its row committed"
    BATCH_CANCELLED = "batch.cancelled", "a batch cancelled: how many of its children were never dispatched"
    TENANT_REGISTERED = (
        "tenant.registered",
        "once per tenant: who registered it (the registry row follows it)",
    )
    TENANT_OFFBOARD_REQUESTED = (
        "tenant.offboard_requested",
        "an operator's signed request to offboard a tenant, and why: an approver of another identity decides",
    )
    TENANT_OFFBOARDED = (
        "tenant.offboarded",
        "once per tenant: the approved decision, its tokens revoked, what is erased and what evidence stays",
    )
    TENANT_DATA_ERASED = "tenant.data_erased", "a later offboarding run erased objects the first could not"
    TEMPLATE_SUBMITTED = (
        "template.submitted",
        "a redaction template version: its author, effective time and rules",
    )
    TEMPLATE_APPROVED = "template.approved", "a template version's approval, by someone other than the author"
    RULESET_CANARY = "ruleset.canary", "a tenant's new contract reviews are routed to a candidate ruleset"
    RULESET_ROLLED_BACK = "ruleset.rolled_back", "routing the tenant to the candidate stopped"
    WEBHOOK_CONFIGURED = (
        "webhook.configured",
        "an operator set a tenant's webhook: its URL's SHA-256 and the id of its new secret, never the secret",
    )
    WEBHOOK_ROTATED = (
        "webhook.rotated",
        "an operator rotated a tenant's webhook secret: the new secret's id, and until when the previous one signs too",
    )
    WEBHOOK_REPLAYED = "webhook.replayed", "an operator sent a dead webhook delivery again: its id, and why"
    PART_DECIDED = (
        "part.decided",
        "a reviewer's signed decision on a derived part (approved or rejected, with a reason and the part's digest); "
        "a merge admits a part whose latest decision, this or its contract review's, approves it",
    )
    # the actor registry: events of no tenant (their tenant is ""), each carrying the signed request that made it
    ACTOR_BOOTSTRAPPED = "actor.bootstrapped", "once per deployment: the first admin, signed by its own key"
    ACTOR_REGISTERED = "actor.registered", "an actor's name, roles and first key"
    ACTOR_ROLES_CHANGED = "actor.roles_changed", "an actor's roles from now on"
    ACTOR_KEY_ADDED = "actor.key_added", "another public key of an actor"
    ACTOR_KEY_REVOKED = "actor.key_revoked", "from now on the key authorizes nothing"
    KEYS_ROTATED = "keys.rotated", "an admin rotated the service's signing keys: the keyring document it published"
    KEYS_REVOKED = "keys.revoked", "an admin revoked a generation of the service's signing keys"
    ACTION_REFUSED = (
        "action.refused",
        "a privileged action refused: its code, and the signed request only when its signature verified",
    )
    # upkeep: events of no tenant either, recorded by the process that did the work
    SWEEP_COMPLETED = (
        "sweep.completed",
        "a sweep of abandoned attempt directories ran (`evidence sweep`, the hourly maintenance job): how many it "
        "removed, kept (a live lease, or too young to be abandoned) and failed to remove",
    )


class Stage(StrEnum):
    """The clocks of one tenant-month, in the order it meets them; each is recorded as ``<stage>_ms``."""

    QUEUE_WAIT = "queue_wait"
    RENDER = "render"
    VALIDATE = "validate"
    SIGN = "sign"
    PUBLISH = "publish"

    @property
    def clock(self) -> str:
        return f"{self.value}_ms"


class Lane(StrEnum):
    """Evidence lanes: archive (the default), oversize (large sources, fewer at a time) and preview (a quick,
    reduced-fidelity rendering that never becomes evidence)."""

    ARCHIVE = "archive"
    OVERSIZE = "oversize"
    PREVIEW = "preview"


@dataclass(frozen=True)
class LedgerEvent:
    """One audit event as the ledger stores it: its position, type, chain hash and hashed body."""

    seq: int
    event_type: str
    event_hash: str
    body: dict


@dataclass(frozen=True)
class ChainedEvent:
    """An event with what checks its place in the chain: its stored body text, the hash it links from and its own
    (``parsed`` is the body). The lineage walk reads one from the ledger (ledger/documents.py) or, with no database,
    from an audit package's proofs (audit/package_documents.py): so it lives here, not among the ledger's rows."""

    seq: int
    prev_hash: str
    event_hash: str
    body: str  # the exact text the chain hashes
    parsed: dict


TENANT_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
# [0-9], never \d: \d matches every script's digits (and int() reads them), so "٢٠٢٦-07" passed for 2026-07
PERIOD = re.compile(r"^([0-9]{4})-(0[1-9]|1[0-2])$")
FIRST_PERIOD = "2025-01"  # the first month a deployment publishes evidence for, unless EVIDENCE_FIRST_PERIOD says


def first_open_period(today: date, open_months: int, first_period: str) -> str:
    """The oldest open month on ``today``: the last ``open_months`` complete months are open (Dagster partitions
    that the schedule, backfills and evidence jobs can run), never before ``first_period``. Older months are closed:
    their bundles stay in the archive (`evidence verify`) and their events in the ledger (`evidence ledger
    prove`, `evidence stats`), and nothing runs for them again."""
    index = today.year * 12 + today.month - 1 - open_months
    return max(first_period, f"{index // 12:04d}-{index % 12 + 1:02d}")


# A tenant-month is overdue when its bundle is not published this long after its month closed: the schedule runs at
# 02:00 UTC on the 1st, and the day after leaves room for its retries (the retry sensor). The monthly assets'
# freshness policy (defs/assets.py) and the metric evidence_tenant_months_overdue keep this one deadline.
OVERDUE_AFTER = timedelta(days=1, hours=2)


def overdue_deadline_cron() -> str:
    """OVERDUE_AFTER as the cron of Dagster's freshness deadline: 02:00 UTC on the 2nd of every month."""
    return f"0 {OVERDUE_AFTER.seconds // 3600} {OVERDUE_AFTER.days + 1} * *"


def overdue_period(now: datetime) -> tuple[str, datetime]:
    """The newest month whose deadline has passed at ``now`` (UTC), and the moment it closed: a tenant registered
    before that moment and without the month's bundle is overdue."""
    index = now.year * 12 + now.month - 1
    month_start = datetime(now.year, now.month, 1, tzinfo=timezone.utc)
    closes = 1 if now >= month_start + OVERDUE_AFTER else 2  # months back from now's: the period, then its close
    period, close = index - closes, index - closes + 1
    return f"{period // 12:04d}-{period % 12 + 1:02d}", datetime(close // 12, close % 12 + 1, 1, tzinfo=timezone.utc)


def validate_tenant_id(tenant: str) -> str:
    """Tenant ids are the only user-supplied text that ever reaches a path, key or partition."""
    if not isinstance(tenant, str) or not TENANT_ID.fullmatch(tenant):
        raise EvidenceError(ReasonCode.TENANT_ID_INVALID, "tenant id must match ^[a-z0-9][a-z0-9-]{0,62}$")
    return tenant


def validate_period(period: str) -> str:
    if not isinstance(period, str) or not PERIOD.fullmatch(period):
        raise EvidenceError(ReasonCode.PERIOD_INVALID, "period must be YYYY-MM")
    return period


@dataclass(frozen=True)
class TenantMonth:
    tenant: str
    period: str  # YYYY-MM

    def __post_init__(self) -> None:
        validate_tenant_id(self.tenant)
        validate_period(self.period)

    @property
    def year(self) -> int:
        return int(self.period[:4])

    @property
    def month(self) -> int:
        return int(self.period[5:])

    def __str__(self) -> str:
        return f"{self.tenant}/{self.period}"


@dataclass(frozen=True)
class SourceRevision:
    """An immutable source revision, named by the sha256 of its canonical bytes."""

    tenant_month: TenantMonth
    sequence: int  # publication order within the tenant-month, starting at 1
    sha256: str
    size: int
    key: str  # key in the source store


@dataclass(frozen=True)
class RenderedReport:
    """A deterministic, unsigned report: the same revision and renderer version give the same bytes."""

    tenant_month: TenantMonth
    source_sha256: str
    renderer_version: str
    pdf: bytes
    sha256: str
    pages: int


@dataclass(frozen=True)
class ActorKeyState:
    """One key of a registered actor: its raw Ed25519 public key (hex), from when it is valid, and when it was
    revoked (None while it is valid)."""

    public_key: str
    valid_from: str
    revoked_at: str | None


@dataclass(frozen=True)
class ActorState:
    """A registered actor as the actor registry holds it, its roles (sorted) and its keys by key id: the same value
    whether read from the ledger's actor tables (ledger/actors.py) or folded from the actor events offline
    (actors/registry.py), so it lives here, below both (the offline fold never loads the database layer)."""

    roles: tuple[str, ...]
    keys: Mapping[str, ActorKeyState]

    def with_key(self, key_id: str, key: ActorKeyState) -> ActorState:
        return replace(self, keys={**self.keys, key_id: key})

    def with_key_revoked(self, key_id: str, revoked_at: str) -> ActorState:
        return self.with_key(key_id, replace(self.keys[key_id], revoked_at=revoked_at))


def current_month(now: float | None = None) -> str:
    """The month an event recorded now (or at ``now``) is filed under, as YYYY-MM (UTC)."""
    return datetime.fromtimestamp(time.time() if now is None else now, timezone.utc).strftime("%Y-%m")


NO_TENANT = ""


@dataclass(frozen=True)
class Deployment:
    """Where an event of no tenant is filed (the actor registry's, the sweeper's): what Ledger._append reads of a
    TenantMonth, with no tenant and the month it is recorded in."""

    period: str = field(default_factory=current_month)
    tenant: str = NO_TENANT
