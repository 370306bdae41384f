"""Settings from the environment. The embedded default keeps everything under $EVIDENCE_HOME.

Each field names its environment variable and says what it means (``setting``): the settings reference in the
docs is generated from them, with the defaults ``Settings.from_env`` computes.

Over 400 lines because every setting, its documentation and its parsing are one table: the reference page is
generated from it, and a setting split from its parser could drift from it."""

from __future__ import annotations

import ipaddress
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import FIRST_PERIOD, PERIOD, TENANT_ID

PADES_LEVELS = ("B-B", "B-T", "B-LT", "B-LTA")  # pyHanko's baseline levels (signing/pades.py)


def setting(env: str | tuple[str, ...], doc: str, default: str | None = None):
    """A Settings field's documentation, read by the generated settings reference (docs/gen_reference.py): the
    environment variable(s) it is read from, what it means, and its default in words where the value from_env
    computes needs them (unset, a share of the CPUs); otherwise the reference prints the computed default."""
    return field(metadata={"env": (env,) if isinstance(env, str) else env, "doc": doc, "default": default})


@dataclass(frozen=True)
class Settings:
    """Every setting the code reads, from the environment, validated. Stores are a filesystem path or
    ``s3://bucket/prefix``."""

    home: Path = setting("EVIDENCE_HOME", "root of the embedded default: every path below defaults under it")
    ledger_url: str = setting("EVIDENCE_LEDGER_URL", "SQLAlchemy URL of the audit ledger (PostgreSQL: "
                              "`postgresql+psycopg2://…`)")
    archive_uri: str = setting("EVIDENCE_ARCHIVE_URI", "archive root: published bundles and `keys/`")
    sources_uri: str = setting("EVIDENCE_SOURCES_URI", "published source revisions (and closed document outcomes)")
    staging_uri: str = setting("EVIDENCE_STAGING_URI", "unsigned reports between render, gate and signing (never "
                               "locked)")
    preview_uri: str = setting("EVIDENCE_PREVIEW_URI", "preview-lane renderings: never signed, never in the "
                               "archive, never evidence")
    keys_dir: Path = setting("EVIDENCE_KEYS_DIR", "private key material (0700 directory, 0600 files); never inside "
                             "the archive. Every process that signs must use the same one (see Key rotation)")
    witness_key: Path | None = setting(
        "EVIDENCE_WITNESS_KEY",
        "path of the checkpoint witness's Ed25519 private key (PKCS#8 PEM, a regular file of mode 0600), kept apart "
        "from the statement key: never inside `EVIDENCE_KEYS_DIR` or a local archive (`CONFIG_INVALID`). When set, "
        "every newly published checkpoint is co-signed by it. Never generated (see Witness)",
        default="unset: no witness")
    witnesses: tuple[tuple[str, str], ...] = setting("EVIDENCE_WITNESSES", "outside witnesses (C2SP tlog-witness) "
        "that co-sign each checkpoint: comma-separated `URL VKEY` pairs", default="unset: no witness")
    log_origin: str = setting("EVIDENCE_LOG_ORIGIN", "the ledger's C2SP checkpoint origin and note key name: unique "
                              "per deployment, a schema-less URL such as `evidence.example.com/ledger`")
    pades_level: str = setting(
        "EVIDENCE_PADES_LEVEL",
        "`B-B`, `B-T`, `B-LT` or `B-LTA`; every level above B-B needs `EVIDENCE_TSA_URL`. **Production: set "
        "`B-LTA`** (see Long-term signatures); B-B is the offline demo default")
    tsa_url: str | None = setting(
        "EVIDENCE_TSA_URL", "the `http(s)://` URL of an RFC 3161 time stamp authority; its root certificate is "
        "provisioned as `tsa-root.pem` in `EVIDENCE_KEYS_DIR`")
    signature_trust_roots: Path | None = setting(
        "EVIDENCE_SIGNATURE_TRUST_ROOTS",
        "a PEM file of CA certificates the signature check of uploaded bundles trusts beside the service's signing "
        "root; part of the trust policy's version", default="unset: the service's own root only")
    oscal_controls: Path | None = setting(
        "EVIDENCE_OSCAL_CONTROLS",
        "the operator's controls mapping (JSON) of the OSCAL Assessment Results `evidence export` writes; "
        "`evidence export --controls FILE` overrides it (see OSCAL assessment results)",
        default="unset: the documented default mapping")
    policy_version: str = setting("EVIDENCE_POLICY_VERSION",
                                  "part of the bundle identity: change it to publish new bundles")
    s3_endpoint_url: str | None = setting("EVIDENCE_S3_ENDPOINT_URL", "S3 endpoint; credentials come from the "
                                          "standard AWS chain (`AWS_ACCESS_KEY_ID`, roles, …)",
                                          default="unset: AWS's")
    s3_region: str | None = setting(("EVIDENCE_S3_REGION", "AWS_REGION"), "S3 region (`AWS_REGION` when "
                                    "`EVIDENCE_S3_REGION` is unset)", default="unset: AWS's")
    s3_object_lock_mode: str | None = setting(
        "EVIDENCE_S3_OBJECT_LOCK_MODE", "`GOVERNANCE` or `COMPLIANCE` retention for every archive and source "
        "object", default="unset: off")
    s3_object_lock_days: int = setting("EVIDENCE_S3_OBJECT_LOCK_DAYS", "the retention in days (at least 1 when a "
                                       "mode is set)")
    s3_server_side_encryption: str | None = setting("EVIDENCE_S3_SSE", "server-side encryption: `AES256` or "
                                                    "`aws:kms`", default="unset: off")
    s3_kms_key_id: str | None = setting("EVIDENCE_S3_KMS_KEY_ID", "the KMS key of `aws:kms` encryption",
                                        default="unset: the bucket's")
    s3_deadline_seconds: float = setting(
        "EVIDENCE_S3_DEADLINE_SECONDS", "the whole of one S3 store call, its retries and the object body it reads "
        "included, whatever the endpoint does (`STORE_UNAVAILABLE` past it); botocore's own timeouts bound each "
        "read only")
    work_dir: Path = setting("EVIDENCE_WORK_DIR", "private per-attempt scratch directories (local to each worker)")
    lease_seconds: float = setting("EVIDENCE_LEASE_SECONDS", "an attempt that stops renewing loses its lease after "
                                   "this long; also the sweeper's minimum age")
    max_attempts: int = setting("EVIDENCE_MAX_ATTEMPTS", "transient failures: failed attempts before a job is "
                                "`dead` (with the time budget below: both must be spent)")
    retry_budget_seconds: float = setting("EVIDENCE_RETRY_BUDGET_SECONDS", "transient failures: time since "
                                          "acceptance (or the last replay) before a job is `dead`")
    retry_delay_seconds: float = setting(
        "EVIDENCE_RETRY_DELAY_SECONDS", "a job's wait in `retry_wait` after its first failed try (its "
        "`next_attempt_at`; a document job, or a tenant-month whose run spent its in-run retries); doubled per "
        "later failed try")
    processor_memory_mb: int = setting(
        "EVIDENCE_PROCESSOR_MEMORY_MB", "how many MiB the address space of the worker process each piece of "
        "document work (gate, signature check, processor, second pass) runs in may grow beyond what it inherited "
        "(`RLIMIT_AS`; `PROCESSOR_RESOURCE_EXHAUSTED`)")
    processor_seconds: float = setting("EVIDENCE_PROCESSOR_SECONDS", "that worker process's wall time before it is "
                                       "killed (`PROCESSOR_TIMED_OUT`)")
    workers: int | None = setting(
        "EVIDENCE_WORKERS", "worker processes per run for the partitions of its range, and for `evidence verify`",
        default="a share of the CPUs: the CPUs ÷ `max_concurrent_runs`, rounded up, for a queued run, every CPU in "
                "process and for `evidence verify`")
    oversize_bytes: int = setting("EVIDENCE_OVERSIZE_BYTES", "source revisions above this size go to the "
                                  "`oversize` lane")
    oversize_workers: int = setting("EVIDENCE_OVERSIZE_WORKERS", "how many oversize tenant-months run at a time "
                                    "per run")
    pool_wait_seconds: float = setting("EVIDENCE_POOL_WAIT_SECONDS", "how long an in-process run (`evidence demo`) "
                                       "waits for a Dagster pool slot held by a live run")
    generate_dev_keys: bool = setting("EVIDENCE_GENERATE_DEV_KEYS", "`0` or `1`; set `0` in production: missing "
                                      "keys are then `KEY_MATERIAL_INVALID`, never a new identity")
    dagster_home_override: Path | None = setting(
        "DAGSTER_HOME", "the Dagster instance. When unset, `evidence` seeds `$EVIDENCE_HOME/dagster` with "
        "`dagster.yaml` (SQLite), or with `dagster.production.yaml` when `DAGSTER_PG_URL` is set",
        default="unset: `$EVIDENCE_HOME/dagster`")
    dagster_pg_url: str | None = setting("DAGSTER_PG_URL", "PostgreSQL for Dagster's run, event-log and schedule "
                                         "storage (`dagster.production.yaml`)", default="unset: SQLite")
    documents_uri: str = setting("EVIDENCE_DOCUMENTS_URI", "uploaded documents (intake): private, put-once, "
                                 "content-addressed; on S3 always encrypted")
    intake_max_bytes: int = setting("EVIDENCE_INTAKE_MAX_BYTES", "the largest document intake admits, in bytes")
    document_page_size: int = setting("EVIDENCE_DOCUMENT_PAGE_SIZE", "document jobs per dispatch page (one Dagster "
                                      "run)")
    tenant_max_jobs: int = setting("EVIDENCE_TENANT_MAX_JOBS", "quota: a tenant's outstanding (not yet terminal) "
                                   "document jobs")
    tenant_max_bytes: int = setting("EVIDENCE_TENANT_MAX_BYTES", "quota: a tenant's stored document bytes")
    intake_max_queue_age_seconds: float = setting(
        "EVIDENCE_INTAKE_MAX_QUEUE_AGE_SECONDS", "backpressure: a tenant's new jobs get 503 while its own oldest "
        "unstarted job is older")
    intake_max_queued_jobs: int = setting(
        "EVIDENCE_INTAKE_MAX_QUEUED_JOBS", "backpressure for true overload: new jobs of any tenant get 503 while "
        "every tenant's outstanding jobs together reach this")
    # the connection limits of every server (http_guard.py)
    intake_max_headers: int = setting("EVIDENCE_INTAKE_MAX_HEADERS", "headers per request (431 `HEADERS_TOO_LARGE`)")
    intake_max_header_bytes: int = setting("EVIDENCE_INTAKE_MAX_HEADER_BYTES", "bytes of request line and headers "
                                           "together (431 `HEADERS_TOO_LARGE`)")
    intake_header_timeout_seconds: float = setting(
        "EVIDENCE_INTAKE_HEADER_TIMEOUT_SECONDS", "from connecting (or a kept-alive request's first byte) to its "
        "last header (408 `REQUEST_TIMEOUT`); also the body's grace")
    intake_min_body_rate: int = setting("EVIDENCE_INTAKE_MIN_BODY_BYTES_PER_SECOND", "bytes per second a body keeps "
                                        "up after the grace (408)")
    intake_request_timeout_seconds: float = setting(
        "EVIDENCE_INTAKE_REQUEST_TIMEOUT_SECONDS", "from the last header to the end of the answer (408 if nothing "
        "was answered yet)")
    intake_max_connections: int = setting(
        "EVIDENCE_INTAKE_MAX_CONNECTIONS", "connections per server process, never more than its descriptor limit "
        "less 64 (503 `INTAKE_BUSY`)")
    intake_max_uploads: int = setting("EVIDENCE_INTAKE_MAX_UPLOADS", "uploads being received per server process "
                                      "(503 `INTAKE_BUSY`)")
    intake_tenant_max_uploads: int = setting("EVIDENCE_INTAKE_TENANT_MAX_UPLOADS", "uploads of one tenant being "
                                             "received per server process (503 `INTAKE_BUSY`)")
    download_presign_seconds: int | None = setting(
        "EVIDENCE_DOWNLOAD_PRESIGN_SECONDS", "with an S3 archive: a job output's download answers `303 See Other` "
        "to a presigned URL valid this many seconds (1-3600) instead of carrying the bytes; a local archive always "
        "proxies, and so does every bundle file", default="unset: the intake server carries the bytes")
    open_months: int = setting("EVIDENCE_OPEN_MONTHS", "the last complete months that are Dagster partitions (read "
                               "when the code location loads); older months are closed")
    first_period: str = setting("EVIDENCE_FIRST_PERIOD", "the first month the deployment publishes evidence for "
                                "(`YYYY-MM`, read when the code location loads): no month before it is open")
    action_max_age_seconds: float = setting(
        "EVIDENCE_ACTION_MAX_AGE_SECONDS", "how far a signed actor request's time may be from the service's clock, "
        "either way (`ACTION_EXPIRED`)")
    actor_key: Path | None = setting(
        "EVIDENCE_ACTOR_KEY", "the acting person's own Ed25519 private key (PKCS#8 PEM, 0600) that the CLI signs "
        "privileged actions with (`--key` wins); never a service key", default="unset: `--key` is needed")
    operator_api_port: int | None = setting(
        "EVIDENCE_OPERATOR_API_PORT", "the port `evidence operator-api serve` serves the operator API on (1-65535), "
        "apart from the tenant API; on 127.0.0.1 unless `--host` says otherwise",
        default="unset: the operator API is off")
    landing_uri: str | None = setting(
        "EVIDENCE_LANDING_URI", "where tenants' source files land for `source_landing_sensor` to publish: a folder "
        "or `s3://bucket/prefix` holding `<tenant>/<YYYY-MM>/*.csv`; the path names the tenant, so each tenant's "
        "system may write only its own `<tenant>/` folder", default="unset: the sensor skips")
    actor: str | None = setting(
        "EVIDENCE_ACTOR", "the acting person's actor name that the CLI signs privileged actions as (`--actor` wins)",
        default="unset: the key file's name without `.pem`")
    # webhooks (webhooks/): where they may go, how often they are tried, how long a rotated secret still signs
    webhook_allowed_networks: tuple[str, ...] = setting(
        "EVIDENCE_WEBHOOK_ALLOWED_NETWORKS", "comma-separated networks (CIDR) every address of a webhook's host must "
        "lie in, else `WEBHOOK_HOST_REFUSED`; the default allows loopback only (the demo)",
        default="`127.0.0.0/8,::1/128`")
    webhook_max_attempts: int = setting("EVIDENCE_WEBHOOK_MAX_ATTEMPTS", "attempts at one webhook delivery before "
                                        "it is dead (listed by `evidence webhook deliveries`, replayable)")
    webhook_retry_seconds: float = setting("EVIDENCE_WEBHOOK_RETRY_SECONDS", "wait after a delivery's first failed "
                                           "attempt; doubled after each later one, with jitter")
    webhook_retry_max_seconds: float = setting("EVIDENCE_WEBHOOK_RETRY_MAX_SECONDS", "the longest wait between two "
                                               "attempts at a delivery (the cap of the backoff)")
    webhook_timeout_seconds: float = setting("EVIDENCE_WEBHOOK_TIMEOUT_SECONDS", "the whole of one attempt "
                                             "(resolve, connect, send, the answer), whatever the receiver does; a "
                                             "deliverer's claim on a delivery lasts four times this")
    webhook_rotation_seconds: float = setting("EVIDENCE_WEBHOOK_ROTATION_SECONDS", "after `evidence tenant webhook "
                                              "rotate`, how long the previous secret still signs beside the new one")

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
    def from_env(cls, environ: dict[str, str] | None = None, overrides: dict[str, str] | None = None) -> Settings:
        """Settings from ``environ`` (the process environment by default), with ``overrides`` on top."""
        env = {**(os.environ if environ is None else environ), **(overrides or {})}
        home = Path(env.get("EVIDENCE_HOME", ".evidence")).absolute()
        level = env.get("EVIDENCE_PADES_LEVEL", "B-B")
        if level not in PADES_LEVELS:
            raise EvidenceError(ReasonCode.CONFIG_INVALID,
                                f"EVIDENCE_PADES_LEVEL must be one of {', '.join(PADES_LEVELS)}")
        tsa_url = env.get("EVIDENCE_TSA_URL") or None
        if level != "B-B" and not (tsa_url or "").startswith(("http://", "https://")):
            raise EvidenceError(ReasonCode.CONFIG_INVALID,
                                f"PAdES {level} needs EVIDENCE_TSA_URL, the http(s) URL of an RFC 3161 TSA")
        lock_mode = env.get("EVIDENCE_S3_OBJECT_LOCK_MODE") or None
        if lock_mode not in (None, "GOVERNANCE", "COMPLIANCE"):
            raise EvidenceError(ReasonCode.CONFIG_INVALID,
                                "EVIDENCE_S3_OBJECT_LOCK_MODE must be GOVERNANCE or COMPLIANCE")
        lock_days = env.get("EVIDENCE_S3_OBJECT_LOCK_DAYS", "0")
        if not lock_days.isdigit() or (lock_mode and int(lock_days) < 1):
            raise EvidenceError(ReasonCode.CONFIG_INVALID,
                                "EVIDENCE_S3_OBJECT_LOCK_DAYS must be a whole number of days >= 1")

        keys_dir = Path(env.get("EVIDENCE_KEYS_DIR", home / "keys")).absolute()
        witness_key = Path(env["EVIDENCE_WITNESS_KEY"]).absolute() if env.get("EVIDENCE_WITNESS_KEY") else None
        if witness_key is not None and keys_dir in witness_key.parents:
            raise EvidenceError(ReasonCode.CONFIG_INVALID,
                                "EVIDENCE_WITNESS_KEY must be kept apart from EVIDENCE_KEYS_DIR, not inside it")
        actor_key = Path(env["EVIDENCE_ACTOR_KEY"]).absolute() if env.get("EVIDENCE_ACTOR_KEY") else None
        if actor_key is not None and keys_dir in actor_key.parents:  # an operator's key is never the service's
            raise EvidenceError(ReasonCode.CONFIG_INVALID,
                                "EVIDENCE_ACTOR_KEY must be kept apart from EVIDENCE_KEYS_DIR, not inside it")

        def store(variable: str, default: Path) -> str:
            value = env.get(variable) or str(default)
            return value if value.startswith("s3://") else str(Path(value).absolute())

        settings = cls(
            home=home,
            ledger_url=env.get("EVIDENCE_LEDGER_URL", f"sqlite:///{home / 'ledger.sqlite'}"),
            archive_uri=store("EVIDENCE_ARCHIVE_URI", home / "archive"),
            sources_uri=store("EVIDENCE_SOURCES_URI", home / "sources"),
            landing_uri=store("EVIDENCE_LANDING_URI", Path()) if env.get("EVIDENCE_LANDING_URI") else None,
            staging_uri=store("EVIDENCE_STAGING_URI", home / "staging"),
            preview_uri=store("EVIDENCE_PREVIEW_URI", home / "previews"),
            keys_dir=keys_dir,
            witness_key=witness_key,
            **_witnessing(env),
            pades_level=level,
            tsa_url=tsa_url,
            signature_trust_roots=(
                Path(env["EVIDENCE_SIGNATURE_TRUST_ROOTS"]).absolute() if env.get("EVIDENCE_SIGNATURE_TRUST_ROOTS")
                else None
            ),
            oscal_controls=(
                Path(env["EVIDENCE_OSCAL_CONTROLS"]).absolute() if env.get("EVIDENCE_OSCAL_CONTROLS") else None
            ),
            policy_version=env.get("EVIDENCE_POLICY_VERSION", "policy-2026.1"),
            s3_endpoint_url=env.get("EVIDENCE_S3_ENDPOINT_URL") or None,
            s3_region=env.get("EVIDENCE_S3_REGION") or env.get("AWS_REGION") or None,
            s3_object_lock_mode=lock_mode,
            s3_object_lock_days=int(lock_days),
            s3_server_side_encryption=env.get("EVIDENCE_S3_SSE") or None,
            s3_kms_key_id=env.get("EVIDENCE_S3_KMS_KEY_ID") or None,
            s3_deadline_seconds=_positive(env, "EVIDENCE_S3_DEADLINE_SECONDS", 300),
            work_dir=Path(env.get("EVIDENCE_WORK_DIR", home / "work")).absolute(),
            lease_seconds=_positive(env, "EVIDENCE_LEASE_SECONDS", 120),
            max_attempts=_whole(env, "EVIDENCE_MAX_ATTEMPTS", 4),
            retry_budget_seconds=_positive(env, "EVIDENCE_RETRY_BUDGET_SECONDS", 900),
            retry_delay_seconds=_positive(env, "EVIDENCE_RETRY_DELAY_SECONDS", 30),
            processor_memory_mb=_whole(env, "EVIDENCE_PROCESSOR_MEMORY_MB", 1024),
            processor_seconds=_positive(env, "EVIDENCE_PROCESSOR_SECONDS", 600),
            workers=_whole(env, "EVIDENCE_WORKERS", 1) if "EVIDENCE_WORKERS" in env else None,
            oversize_bytes=_whole(env, "EVIDENCE_OVERSIZE_BYTES", 2 * 1024 * 1024),
            oversize_workers=_whole(env, "EVIDENCE_OVERSIZE_WORKERS", 1),
            pool_wait_seconds=_positive(env, "EVIDENCE_POOL_WAIT_SECONDS", 600),
            generate_dev_keys=_flag(env, "EVIDENCE_GENERATE_DEV_KEYS", True),
            dagster_home_override=Path(env["DAGSTER_HOME"]).absolute() if env.get("DAGSTER_HOME") else None,
            dagster_pg_url=env.get("DAGSTER_PG_URL") or None,
            documents_uri=store("EVIDENCE_DOCUMENTS_URI", home / "documents"),
            intake_max_bytes=_whole(env, "EVIDENCE_INTAKE_MAX_BYTES", 25 * 1024 * 1024),
            document_page_size=_whole(env, "EVIDENCE_DOCUMENT_PAGE_SIZE", 50),
            tenant_max_jobs=_whole(env, "EVIDENCE_TENANT_MAX_JOBS", 1000),
            tenant_max_bytes=_whole(env, "EVIDENCE_TENANT_MAX_BYTES", 10 * 1024 ** 3),
            intake_max_queue_age_seconds=_positive(env, "EVIDENCE_INTAKE_MAX_QUEUE_AGE_SECONDS", 300),
            intake_max_queued_jobs=_whole(env, "EVIDENCE_INTAKE_MAX_QUEUED_JOBS", 100_000),
            intake_max_headers=_whole(env, "EVIDENCE_INTAKE_MAX_HEADERS", 64),
            intake_max_header_bytes=_whole(env, "EVIDENCE_INTAKE_MAX_HEADER_BYTES", 16 * 1024),
            intake_header_timeout_seconds=_positive(env, "EVIDENCE_INTAKE_HEADER_TIMEOUT_SECONDS", 10),
            intake_min_body_rate=_whole(env, "EVIDENCE_INTAKE_MIN_BODY_BYTES_PER_SECOND", 32 * 1024),
            intake_request_timeout_seconds=_positive(env, "EVIDENCE_INTAKE_REQUEST_TIMEOUT_SECONDS", 900),
            intake_max_connections=_whole(env, "EVIDENCE_INTAKE_MAX_CONNECTIONS", 1000),
            intake_max_uploads=_whole(env, "EVIDENCE_INTAKE_MAX_UPLOADS", 64),
            intake_tenant_max_uploads=_whole(env, "EVIDENCE_INTAKE_TENANT_MAX_UPLOADS", 8),
            download_presign_seconds=_presign_seconds(env),
            open_months=open_months(env),
            first_period=first_period(env),
            action_max_age_seconds=_positive(env, "EVIDENCE_ACTION_MAX_AGE_SECONDS", 300),
            operator_api_port=_port(env, "EVIDENCE_OPERATOR_API_PORT") if env.get("EVIDENCE_OPERATOR_API_PORT")
            else None,
            actor_key=actor_key,
            actor=_actor_name(env),
            webhook_allowed_networks=_networks(env, "EVIDENCE_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8,::1/128"),
            webhook_max_attempts=_whole(env, "EVIDENCE_WEBHOOK_MAX_ATTEMPTS", 12),
            webhook_retry_seconds=_positive(env, "EVIDENCE_WEBHOOK_RETRY_SECONDS", 10),
            webhook_retry_max_seconds=_positive(env, "EVIDENCE_WEBHOOK_RETRY_MAX_SECONDS", 3600),
            webhook_timeout_seconds=_positive(env, "EVIDENCE_WEBHOOK_TIMEOUT_SECONDS", 10),
            webhook_rotation_seconds=_positive(env, "EVIDENCE_WEBHOOK_ROTATION_SECONDS", 86400),
        )
        archive = None if settings.archive_uri.startswith("s3://") else Path(settings.archive_uri)
        if witness_key is not None and archive in witness_key.parents:
            raise EvidenceError(ReasonCode.CONFIG_INVALID, "EVIDENCE_WITNESS_KEY must not be inside the archive")
        if actor_key is not None and archive in actor_key.parents:
            raise EvidenceError(ReasonCode.CONFIG_INVALID, "EVIDENCE_ACTOR_KEY must not be inside the archive")
        return settings


def _actor_name(env: dict[str, str]) -> str | None:
    """Actor names are slugs, like tenant ids (actors/requests.py)."""
    name = env.get("EVIDENCE_ACTOR") or None
    if name is not None and not TENANT_ID.fullmatch(name):
        raise EvidenceError(ReasonCode.CONFIG_INVALID, "EVIDENCE_ACTOR must be an actor name (a slug)")
    return name


def _presign_seconds(env: dict[str, str]) -> int | None:
    if not env.get("EVIDENCE_DOWNLOAD_PRESIGN_SECONDS"):
        return None
    seconds = _whole(env, "EVIDENCE_DOWNLOAD_PRESIGN_SECONDS", 1)
    if seconds > 3600:  # a link that outlives a token's revocation by hours is not short-lived
        raise EvidenceError(ReasonCode.CONFIG_INVALID, "EVIDENCE_DOWNLOAD_PRESIGN_SECONDS must be 1-3600")
    return seconds


# Dagster's guidance is at most 100,000 partitions per asset: 6 open months keep 10,000 tenants at 60,000, and
# stay within it up to 16,666 tenants (bench/README.md, "scale.py"). The registry sensor warns past it.
DEFAULT_OPEN_MONTHS = 6
PARTITIONS_GUIDANCE = 100_000


def open_months(environ: dict[str, str] | None = None) -> int:
    """EVIDENCE_OPEN_MONTHS alone (the code location reads it when it loads, and must not depend on the rest)."""
    return _whole(os.environ if environ is None else environ, "EVIDENCE_OPEN_MONTHS", DEFAULT_OPEN_MONTHS)


def first_period(environ: dict[str, str] | None = None) -> str:
    """EVIDENCE_FIRST_PERIOD alone (read with EVIDENCE_OPEN_MONTHS when the code location loads): a deployment whose
    tenants' evidence begins before 2025-01 sets it to that month."""
    value = (os.environ if environ is None else environ).get("EVIDENCE_FIRST_PERIOD", FIRST_PERIOD)
    if not PERIOD.fullmatch(value):
        raise EvidenceError(ReasonCode.CONFIG_INVALID, "EVIDENCE_FIRST_PERIOD must be a month, YYYY-MM")
    return value


def _positive(env, name: str, default: float) -> float:
    try:
        value = float(env.get(name, default))
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise EvidenceError(ReasonCode.CONFIG_INVALID, f"{name} must be a positive, finite number")
    return value


def _networks(env, name: str, default: str) -> tuple[str, ...]:
    """A comma-separated list of networks in CIDR notation, each normalized (``ipaddress.ip_network``)."""
    try:
        networks = tuple(str(ipaddress.ip_network(part.strip())) for part in env.get(name, default).split(","))
    except ValueError:
        raise EvidenceError(ReasonCode.CONFIG_INVALID, f"{name} must be networks in CIDR notation, comma-separated") \
            from None
    return networks


def _flag(env, name: str, default: bool) -> bool:
    value = env.get(name, "1" if default else "0")
    if value not in ("0", "1"):
        raise EvidenceError(ReasonCode.CONFIG_INVALID, f"{name} must be 0 or 1")
    return value == "1"


def _port(env, name: str) -> int:
    port = _whole(env, name, 0)
    if port > 65535:
        raise EvidenceError(ReasonCode.CONFIG_INVALID, f"{name} must be a TCP port, 1-65535")
    return port


def _whole(env, name: str, default: int) -> int:
    value = str(env.get(name, default))
    if not value.isdigit() or int(value) < 1:
        raise EvidenceError(ReasonCode.CONFIG_INVALID, f"{name} must be a whole number >= 1")
    return int(value)




def _witnessing(env: dict[str, str]) -> dict:
    """EVIDENCE_WITNESSES and EVIDENCE_LOG_ORIGIN, checked (witness/note.py reads their formats)."""
    from evidence_pipeline.witness.note import NoteError, is_key_name, witness_pairs

    origin = env.get("EVIDENCE_LOG_ORIGIN", "evidence-pipeline.invalid/ledger")
    if not is_key_name(origin):
        raise EvidenceError(ReasonCode.CONFIG_INVALID, "EVIDENCE_LOG_ORIGIN is a key name: no spaces, no '+'")
    try:
        return {"witnesses": witness_pairs(env.get("EVIDENCE_WITNESSES", "")), "log_origin": origin}
    except NoteError as error:
        raise EvidenceError(ReasonCode.CONFIG_INVALID, f"EVIDENCE_WITNESSES: {error}") from None
