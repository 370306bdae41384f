"""Settings from the environment. The embedded default keeps everything under $EVIDENCE_HOME.

Each setting is declared once, as a field of ``Settings``: its type (the annotation), its environment variable(s),
its default as the text an operator would write (``$EVIDENCE_HOME`` stands for the home), what it means, and, where
the type alone does not say it, how its text is read. ``Settings.from_env`` reads every field from that
declaration, an invalid value is ``CONFIG_INVALID`` with a message naming the variable, and the settings reference
in the docs (docs/gen_reference.py) is generated from the same fields; test_config.py fails on an environment read
of a setting anywhere else.

Not pydantic-settings (it is in the lock, through Dagster's dependencies): its coercions differ from the rules
deployments already rely on (a flag is `0` or `1`, not also `true`/`yes`; a number is finite and positive; an empty
optional variable is unset, an empty number invalid), so every field would need a validator of its own anyway, and
importing it costs the `evidence` command ~0.2 s at every start (pydantic is not loaded by the CLI otherwise).

Over 400 lines because every setting, its documentation and its parsing are one table: the reference page is
generated from it, and a setting split from its parser could drift from it."""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import FIRST_PERIOD, PERIOD, TENANT_ID

PADES_LEVELS = ("B-B", "B-T", "B-LT", "B-LTA")  # pyHanko's baseline levels (signing/pades.py)
HOME = "$EVIDENCE_HOME"  # in a default: the value of EVIDENCE_HOME


class Invalid(ValueError):
    """A reader refuses a variable's text; the message says what the value must be (after the variable's name)."""


Reader = Callable[[str], Any]  # a variable's text -> the field's value; None: as if unset (the default applies)


def setting(
    env: str | tuple[str, ...],
    doc: str,
    default: str | float | None = None,
    *,
    read: Reader | None = None,
    shown: str | None = None,
) -> Any:
    """The one declaration of a Settings field: the environment variable(s) it is read from (the first set one
    wins), what it means, its default as text (None: unset), how its text is read when its type alone does not say
    it (``READERS``), and how the reference page shows the default when its text does not say it (unset, a share of
    the CPUs)."""
    return field(
        metadata={
            "env": (env,) if isinstance(env, str) else env,
            "doc": doc,
            "default": default,
            "read": read,
            "shown": shown,
        }
    )


# ------------------------------------------------------------------------------------------------------- readers


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise Invalid("must be a positive, finite number")
    return value


def whole(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise Invalid("must be a whole number >= 1")
    return int(text)


def between(low: int, high: int, what: str = "") -> Reader:
    def read(text: str) -> int:
        if not text.isdigit() or not low <= int(text) <= high:
            raise Invalid(f"must be {what}{low}-{high}")
        return int(text)

    return read


def flag(text: str) -> bool:
    if text not in ("0", "1"):
        raise Invalid("must be 0 or 1")
    return text == "1"


def days(text: str) -> int:
    """A retention in days: 0 (no lock), or at least 1 when a lock mode is set (``_check``)."""
    if not text.isdigit():
        raise Invalid("must be a whole number of days >= 1")
    return int(text)


def one_of(*choices: str) -> Reader:
    def read(text: str) -> str:
        if text not in choices:
            raise Invalid(f"must be one of {', '.join(choices)}")
        return text

    return read


def optional(read: Reader) -> Reader:
    """An empty value is unset."""
    return lambda text: read(text) if text else None


def absolute(text: str) -> Path:
    return Path(text).absolute()


def store(text: str) -> str:
    """A filesystem path (made absolute) or ``s3://bucket/prefix``."""
    return text if text.startswith("s3://") else str(Path(text).absolute())


def networks(text: str) -> tuple[str, ...]:
    """A comma-separated list of networks in CIDR notation, each normalized (``ipaddress.ip_network``)."""
    try:
        return tuple(str(ipaddress.ip_network(part.strip())) for part in text.split(","))
    except ValueError:
        raise Invalid("must be networks in CIDR notation, comma-separated") from None


def period(text: str) -> str:
    if not PERIOD.fullmatch(text):
        raise Invalid("must be a month, YYYY-MM")
    return text


def actor_name(text: str) -> str:
    """Actor names are slugs, like tenant ids (actors/requests.py)."""
    if not TENANT_ID.fullmatch(text):
        raise Invalid("must be an actor name (a slug)")
    return text


def key_name(text: str) -> str:
    from evidence_pipeline.signed_note import is_key_name  # lazily: the CLI loads config at import

    if not is_key_name(text):
        raise Invalid("is a key name: no spaces, no '+'")
    return text


def witness_list(text: str) -> tuple[tuple[str, str], ...]:
    from evidence_pipeline.signed_note import NoteError, witness_pairs

    try:
        return witness_pairs(text)
    except NoteError as error:
        raise Invalid(f"must be `URL VKEY` pairs: {error}") from None


# the reader of each annotation; a field of any other type names its reader
READERS: dict[str, Reader] = {
    "str": lambda text: text,
    "str | None": optional(lambda text: text),
    "Path": absolute,
    "Path | None": optional(absolute),
    "float": positive,
    "int": whole,
    "bool": flag,
}
STORE = optional(store)  # an empty store variable is unset: its default applies


# ------------------------------------------------------------------------------------------------------ settings


@dataclass(frozen=True)
class Settings:
    """Every setting the code reads, from the environment, validated. Stores are a filesystem path or
    ``s3://bucket/prefix``."""

    home: Path = setting(
        "EVIDENCE_HOME", "root of the embedded default: every path below defaults under it", "./.evidence"
    )
    ledger_url: str = setting(
        "EVIDENCE_LEDGER_URL",
        "SQLAlchemy URL of the audit ledger (PostgreSQL: `postgresql+psycopg2://…`)",
        f"sqlite:///{HOME}/ledger.sqlite",
    )
    archive_uri: str = setting(
        "EVIDENCE_ARCHIVE_URI", "archive root: published bundles and `keys/`", f"{HOME}/archive", read=STORE
    )
    sources_uri: str = setting(
        "EVIDENCE_SOURCES_URI",
        "published source revisions (and closed document outcomes)",
        f"{HOME}/sources",
        read=STORE,
    )
    staging_uri: str = setting(
        "EVIDENCE_STAGING_URI",
        "unsigned reports between render, gate and signing (never locked)",
        f"{HOME}/staging",
        read=STORE,
    )
    preview_uri: str = setting(
        "EVIDENCE_PREVIEW_URI",
        "preview-lane renderings: never signed, never in the archive, never evidence",
        f"{HOME}/previews",
        read=STORE,
    )
    keys_dir: Path = setting(
        "EVIDENCE_KEYS_DIR",
        "private key material (0700 directory, 0600 files); never inside "
        "the archive. Every process that signs must use the same one (see Key rotation)",
        f"{HOME}/keys",
    )
    witness_key: Path | None = setting(
        "EVIDENCE_WITNESS_KEY",
        "path of the checkpoint witness's Ed25519 private key (PKCS#8 PEM, a regular file of mode 0600), kept apart "
        "from the statement key: never inside `EVIDENCE_KEYS_DIR` or a local archive (`CONFIG_INVALID`). When set, "
        "every newly published checkpoint is co-signed by it. Never generated (see Witness)",
        shown="unset: no witness",
    )
    witnesses: tuple[tuple[str, str], ...] = setting(
        "EVIDENCE_WITNESSES",
        "outside witnesses (C2SP tlog-witness) that co-sign each checkpoint: comma-separated `URL VKEY` pairs",
        "",
        read=witness_list,
        shown="unset: no witness",
    )
    log_origin: str = setting(
        "EVIDENCE_LOG_ORIGIN",
        "the ledger's C2SP checkpoint origin and note key name: unique "
        "per deployment, a schema-less URL such as `evidence.example.com/ledger`",
        "evidence-pipeline.invalid/ledger",
        read=key_name,
    )
    pades_level: str = setting(
        "EVIDENCE_PADES_LEVEL",
        "`B-B`, `B-T`, `B-LT` or `B-LTA`; every level above B-B needs `EVIDENCE_TSA_URL`. **Production: set "
        "`B-LTA`** (see Long-term signatures); B-B is the offline demo default",
        "B-B",
        read=one_of(*PADES_LEVELS),
    )
    tsa_url: str | None = setting(
        "EVIDENCE_TSA_URL",
        "the `http(s)://` URL of an RFC 3161 time stamp authority; its root certificate is "
        "provisioned as `tsa-root.pem` in `EVIDENCE_KEYS_DIR`",
    )
    signature_trust_roots: Path | None = setting(
        "EVIDENCE_SIGNATURE_TRUST_ROOTS",
        "a PEM file of CA certificates the signature check of uploaded bundles trusts beside the service's signing "
        "root; part of the trust policy's version",
        shown="unset: the service's own root only",
    )
    oscal_controls: Path | None = setting(
        "EVIDENCE_OSCAL_CONTROLS",
        "the operator's controls mapping (JSON) of the OSCAL Assessment Results `evidence export` writes; "
        "`evidence export --controls FILE` overrides it (see OSCAL assessment results)",
        shown="unset: the documented default mapping",
    )
    policy_version: str = setting(
        "EVIDENCE_POLICY_VERSION", "part of the bundle identity: change it to publish new bundles", "policy-2026.1"
    )
    s3_endpoint_url: str | None = setting(
        "EVIDENCE_S3_ENDPOINT_URL",
        "S3 endpoint; credentials come from the standard AWS chain (`AWS_ACCESS_KEY_ID`, roles, …)",
        shown="unset: AWS's",
    )
    s3_region: str | None = setting(
        ("EVIDENCE_S3_REGION", "AWS_REGION"),
        "S3 region (`AWS_REGION` when `EVIDENCE_S3_REGION` is unset)",
        shown="unset: AWS's",
    )
    s3_object_lock_mode: str | None = setting(
        "EVIDENCE_S3_OBJECT_LOCK_MODE",
        "`GOVERNANCE` or `COMPLIANCE` retention for every archive and source object",
        read=optional(one_of("GOVERNANCE", "COMPLIANCE")),
        shown="unset: off",
    )
    s3_object_lock_days: int = setting(
        "EVIDENCE_S3_OBJECT_LOCK_DAYS", "the retention in days (at least 1 when a mode is set)", 0, read=days
    )
    s3_server_side_encryption: str | None = setting(
        "EVIDENCE_S3_SSE", "server-side encryption: `AES256` or `aws:kms`", shown="unset: off"
    )
    s3_kms_key_id: str | None = setting(
        "EVIDENCE_S3_KMS_KEY_ID", "the KMS key of `aws:kms` encryption", shown="unset: the bucket's"
    )
    s3_deadline_seconds: float = setting(
        "EVIDENCE_S3_DEADLINE_SECONDS",
        "the whole of one S3 store call, its retries and the object body it reads "
        "included, whatever the endpoint does (`STORE_UNAVAILABLE` past it); botocore's own timeouts bound each "
        "read only",
        300,
    )
    work_dir: Path = setting(
        "EVIDENCE_WORK_DIR", "private per-attempt scratch directories (local to each worker)", f"{HOME}/work"
    )
    lease_seconds: float = setting(
        "EVIDENCE_LEASE_SECONDS",
        "an attempt that stops renewing loses its lease after this long; also the sweeper's minimum age",
        120,
    )
    max_attempts: int = setting(
        "EVIDENCE_MAX_ATTEMPTS",
        "transient failures: failed attempts before a job is `dead` (with the time budget below: both must be spent)",
        4,
    )
    retry_budget_seconds: float = setting(
        "EVIDENCE_RETRY_BUDGET_SECONDS",
        "transient failures: time since acceptance (or the last replay) before a job is `dead`",
        900,
    )
    retry_delay_seconds: float = setting(
        "EVIDENCE_RETRY_DELAY_SECONDS",
        "a job's wait in `retry_wait` after its first failed try (its "
        "`next_attempt_at`; a document job, or a tenant-month whose run spent its in-run retries); doubled per "
        "later failed try",
        30,
    )
    processor_memory_mb: int = setting(
        "EVIDENCE_PROCESSOR_MEMORY_MB",
        "how many MiB the address space of the worker process each piece of "
        "document work (gate, signature check, processor, second pass) runs in may grow beyond what it inherited "
        "(`RLIMIT_AS`; `PROCESSOR_RESOURCE_EXHAUSTED`)",
        1024,
    )
    processor_seconds: float = setting(
        "EVIDENCE_PROCESSOR_SECONDS", "that worker process's wall time before it is killed (`PROCESSOR_TIMED_OUT`)", 600
    )
    workers: int | None = setting(
        "EVIDENCE_WORKERS",
        "worker processes per run for the partitions of its range, and for `evidence verify`",
        read=whole,
        shown="a share of the CPUs: the CPUs ÷ `max_concurrent_runs`, rounded up, for a queued run, "
        "every CPU in process and for `evidence verify`",
    )
    oversize_bytes: int = setting(
        "EVIDENCE_OVERSIZE_BYTES", "source revisions above this size go to the `oversize` lane", 2 * 1024 * 1024
    )
    oversize_workers: int = setting(
        "EVIDENCE_OVERSIZE_WORKERS", "how many oversize tenant-months run at a time per run", 1
    )
    pool_wait_seconds: float = setting(
        "EVIDENCE_POOL_WAIT_SECONDS",
        "how long an in-process run (`evidence demo`) waits for a Dagster pool slot held by a live run",
        600,
    )
    generate_dev_keys: bool = setting(
        "EVIDENCE_GENERATE_DEV_KEYS",
        "`0` or `1`; set `0` in production: missing keys are then `KEY_MATERIAL_INVALID`, never a new identity",
        "1",
    )
    dagster_home_override: Path | None = setting(
        "DAGSTER_HOME",
        "the Dagster instance. When unset, `evidence` seeds `$EVIDENCE_HOME/dagster` with "
        "`dagster.yaml` (SQLite), or with `dagster.production.yaml` when `DAGSTER_PG_URL` is set",
        shown="unset: `$EVIDENCE_HOME/dagster`",
    )
    dagster_pg_url: str | None = setting(
        "DAGSTER_PG_URL",
        "PostgreSQL for Dagster's run, event-log and schedule storage (`dagster.production.yaml`)",
        shown="unset: SQLite",
    )
    documents_uri: str = setting(
        "EVIDENCE_DOCUMENTS_URI",
        "uploaded documents (intake): private, put-once, content-addressed; on S3 always encrypted",
        f"{HOME}/documents",
        read=STORE,
    )
    intake_max_bytes: int = setting(
        "EVIDENCE_INTAKE_MAX_BYTES", "the largest document intake admits, in bytes", 25 * 1024 * 1024
    )
    document_page_size: int = setting(
        "EVIDENCE_DOCUMENT_PAGE_SIZE", "document jobs per dispatch page (one Dagster run)", 50
    )
    tenant_max_jobs: int = setting(
        "EVIDENCE_TENANT_MAX_JOBS", "quota: a tenant's outstanding (not yet terminal) document jobs", 1000
    )
    tenant_max_bytes: int = setting(
        "EVIDENCE_TENANT_MAX_BYTES", "quota: a tenant's stored document bytes", 10 * 1024**3
    )
    intake_max_queue_age_seconds: float = setting(
        "EVIDENCE_INTAKE_MAX_QUEUE_AGE_SECONDS",
        "backpressure: a tenant's new jobs get 503 while its own oldest unstarted job is older",
        300,
    )
    intake_max_queued_jobs: int = setting(
        "EVIDENCE_INTAKE_MAX_QUEUED_JOBS",
        "backpressure for true overload: new jobs of any tenant get 503 while "
        "every tenant's outstanding jobs together reach this",
        100_000,
    )
    # the connection limits of every server (http_guard.py)
    intake_max_headers: int = setting(
        "EVIDENCE_INTAKE_MAX_HEADERS", "headers per request (431 `HEADERS_TOO_LARGE`)", 64
    )
    intake_max_header_bytes: int = setting(
        "EVIDENCE_INTAKE_MAX_HEADER_BYTES",
        "bytes of request line and headers together (431 `HEADERS_TOO_LARGE`)",
        16 * 1024,
    )
    intake_header_timeout_seconds: float = setting(
        "EVIDENCE_INTAKE_HEADER_TIMEOUT_SECONDS",
        "from connecting (or a kept-alive request's first byte) to its "
        "last header (408 `REQUEST_TIMEOUT`); also the body's grace",
        10,
    )
    intake_min_body_rate: int = setting(
        "EVIDENCE_INTAKE_MIN_BODY_BYTES_PER_SECOND", "bytes per second a body keeps up after the grace (408)", 32 * 1024
    )
    intake_request_timeout_seconds: float = setting(
        "EVIDENCE_INTAKE_REQUEST_TIMEOUT_SECONDS",
        "from the last header to the end of the answer (408 if nothing was answered yet)",
        900,
    )
    intake_max_connections: int = setting(
        "EVIDENCE_INTAKE_MAX_CONNECTIONS",
        "connections per server process, never more than its descriptor limit less 64 (503 `INTAKE_BUSY`)",
        1000,
    )
    intake_max_uploads: int = setting(
        "EVIDENCE_INTAKE_MAX_UPLOADS", "uploads being received per server process (503 `INTAKE_BUSY`)", 64
    )
    intake_tenant_max_uploads: int = setting(
        "EVIDENCE_INTAKE_TENANT_MAX_UPLOADS",
        "uploads of one tenant being received per server process (503 `INTAKE_BUSY`)",
        8,
    )
    download_presign_seconds: int | None = setting(
        "EVIDENCE_DOWNLOAD_PRESIGN_SECONDS",
        "with an S3 archive: a job output's download answers `303 See Other` "
        "to a presigned URL valid this many seconds (1-3600) instead of carrying the bytes; a local archive always "
        "proxies, and so does every bundle file",
        # a link that outlives a token's revocation by hours is not short-lived
        read=optional(between(1, 3600)),
        shown="unset: the intake server carries the bytes",
    )
    # Dagster's guidance is at most 100,000 partitions per asset (PARTITIONS_GUIDANCE): 6 open months keep 10,000
    # tenants at 60,000, and stay within it up to 16,666 tenants (bench/README.md, "scale.py"). The registry sensor
    # warns past it.
    open_months: int = setting(
        "EVIDENCE_OPEN_MONTHS",
        "the last complete months that are Dagster partitions (read "
        "when the code location loads); older months are closed",
        6,
    )
    first_period: str = setting(
        "EVIDENCE_FIRST_PERIOD",
        "the first month the deployment publishes evidence for "
        "(`YYYY-MM`, read when the code location loads): no month before it is open",
        FIRST_PERIOD,
        read=period,
    )
    action_max_age_seconds: float = setting(
        "EVIDENCE_ACTION_MAX_AGE_SECONDS",
        "how far a signed actor request's time may be from the service's clock, either way (`ACTION_EXPIRED`)",
        300,
    )
    actor_key: Path | None = setting(
        "EVIDENCE_ACTOR_KEY",
        "the acting person's own Ed25519 private key (PKCS#8 PEM, 0600) that the CLI signs "
        "privileged actions with (`--key` wins); never a service key",
        shown="unset: `--key` is needed",
    )
    operator_api_port: int | None = setting(
        "EVIDENCE_OPERATOR_API_PORT",
        "the port `evidence operator-api serve` serves the operator API on (1-65535), "
        "apart from the tenant API; on 127.0.0.1 unless `--host` says otherwise",
        read=optional(between(1, 65535, "a TCP port, ")),
        shown="unset: the operator API is off",
    )
    landing_uri: str | None = setting(
        "EVIDENCE_LANDING_URI",
        "where tenants' source files land for `source_landing_sensor` to publish: a folder "
        "or `s3://bucket/prefix` holding `<tenant>/<YYYY-MM>/*.csv`; the path names the tenant, so each tenant's "
        "system may write only its own `<tenant>/` folder",
        read=STORE,
        shown="unset: the sensor skips",
    )
    actor: str | None = setting(
        "EVIDENCE_ACTOR",
        "the acting person's actor name that the CLI signs privileged actions as (`--actor` wins)",
        read=optional(actor_name),
        shown="unset: the key file's name without `.pem`",
    )
    # webhooks (webhooks/): where they may go, how often they are tried, how long a rotated secret still signs
    webhook_allowed_networks: tuple[str, ...] = setting(
        "EVIDENCE_WEBHOOK_ALLOWED_NETWORKS",
        "comma-separated networks (CIDR) every address of a webhook's host must "
        "lie in, else `WEBHOOK_HOST_REFUSED`; the default allows loopback only (the demo)",
        "127.0.0.0/8,::1/128",
        read=networks,
    )
    webhook_max_attempts: int = setting(
        "EVIDENCE_WEBHOOK_MAX_ATTEMPTS",
        "attempts at one webhook delivery before it is dead (listed by `evidence webhook deliveries`, replayable)",
        12,
    )
    webhook_retry_seconds: float = setting(
        "EVIDENCE_WEBHOOK_RETRY_SECONDS",
        "wait after a delivery's first failed attempt; doubled after each later one, with jitter",
        10,
    )
    webhook_retry_max_seconds: float = setting(
        "EVIDENCE_WEBHOOK_RETRY_MAX_SECONDS",
        "the longest wait between two attempts at a delivery (the cap of the backoff)",
        3600,
    )
    webhook_timeout_seconds: float = setting(
        "EVIDENCE_WEBHOOK_TIMEOUT_SECONDS",
        "the whole of one attempt "
        "(resolve, connect, send, the answer), whatever the receiver does; a "
        "deliverer's claim on a delivery lasts four times this",
        10,
    )
    webhook_rotation_seconds: float = setting(
        "EVIDENCE_WEBHOOK_ROTATION_SECONDS",
        "after `evidence tenant webhook rotate`, how long the previous secret still signs beside the new one",
        86400,
    )

    def worker_processes(self, sharing: int = 1) -> int:
        """EVIDENCE_WORKERS, or by default this process's share of the CPUs it may use when ``sharing`` processes
        like it fork workers on the same host at once, rounded up: together they leave no CPU without a worker."""
        return self.workers or math.ceil(len(os.sched_getaffinity(0)) / sharing)

    @property
    def uses_s3(self) -> bool:
        uris = (self.archive_uri, self.sources_uri, self.staging_uri, self.preview_uri, self.documents_uri)
        return any(uri.startswith("s3://") for uri in uris)

    @property
    def dagster_home(self) -> Path:
        """The Dagster instance: DAGSTER_HOME, or $EVIDENCE_HOME/dagster."""
        return self.dagster_home_override or self.home / "dagster"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, overrides: Mapping[str, str] | None = None) -> Settings:
        """Settings from ``environ`` (the process environment by default), with ``overrides`` on top: every field
        read from its declaration (home first: the defaults of the others name it), then the rules between them."""
        env = {**(os.environ if environ is None else environ), **(overrides or {})}
        values: dict[str, Any] = {}
        for declared in dataclasses.fields(cls):
            values[declared.name] = _read(declared, env, values.get("home"))
        settings = cls(**values)
        _check(settings)
        return settings


def _read(declared: dataclasses.Field, env: Mapping[str, str], home: Path | None) -> Any:
    """One field's value: from the first of its variables that is set (and not empty where empty means unset),
    else from its default's text (``$EVIDENCE_HOME`` replaced by ``home``), else None."""
    read = declared.metadata["read"] or READERS[str(declared.type)]
    variables, default = declared.metadata["env"], declared.metadata["default"]
    texts = [(name, env[name]) for name in variables if name in env]
    if default is not None:
        texts.append((variables[0], str(default).replace(HOME, str(home))))
    for name, text in texts:
        try:
            value = read(text)
        except Invalid as problem:
            raise EvidenceError(ReasonCode.CONFIG_INVALID, f"{name} {problem}") from None
        if value is not None:
            return value
    return None


def _check(settings: Settings) -> None:
    """The rules between settings."""
    if settings.pades_level != "B-B" and not (settings.tsa_url or "").startswith(("http://", "https://")):
        raise EvidenceError(
            ReasonCode.CONFIG_INVALID,
            f"PAdES {settings.pades_level} needs EVIDENCE_TSA_URL, the http(s) URL of an RFC 3161 TSA",
        )
    if settings.s3_object_lock_mode and settings.s3_object_lock_days < 1:
        raise EvidenceError(
            ReasonCode.CONFIG_INVALID, "EVIDENCE_S3_OBJECT_LOCK_DAYS must be a whole number of days >= 1"
        )
    archive = None if settings.archive_uri.startswith("s3://") else Path(settings.archive_uri)
    for variable, key in (("EVIDENCE_WITNESS_KEY", settings.witness_key), ("EVIDENCE_ACTOR_KEY", settings.actor_key)):
        # a witness's or an operator's key is never the service's, nor published
        if key is not None and settings.keys_dir in key.parents:
            raise EvidenceError(
                ReasonCode.CONFIG_INVALID, f"{variable} must be kept apart from EVIDENCE_KEYS_DIR, not inside it"
            )
        if key is not None and archive in key.parents:
            raise EvidenceError(ReasonCode.CONFIG_INVALID, f"{variable} must not be inside the archive")


DECLARED = {declared.name: declared for declared in dataclasses.fields(Settings)}
PARTITIONS_GUIDANCE = 100_000


def open_months(environ: Mapping[str, str] | None = None) -> int:
    """EVIDENCE_OPEN_MONTHS alone (the code location reads it when it loads, and must not depend on the rest)."""
    return _read(DECLARED["open_months"], os.environ if environ is None else environ, None)


def first_period(environ: Mapping[str, str] | None = None) -> str:
    """EVIDENCE_FIRST_PERIOD alone (read with EVIDENCE_OPEN_MONTHS when the code location loads): a deployment whose
    tenants' evidence begins before 2025-01 sets it to that month."""
    return _read(DECLARED["first_period"], os.environ if environ is None else environ, None)
