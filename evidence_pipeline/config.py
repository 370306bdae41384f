"""Settings from the environment. The embedded default keeps everything under $EVIDENCE_HOME."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import FIRST_PERIOD, PERIOD

PADES_LEVELS = ("B-B", "B-T", "B-LT", "B-LTA")  # pyHanko's baseline levels (signing/pades.py)


@dataclass(frozen=True)
class Settings:
    home: Path
    ledger_url: str
    # Stores are a filesystem path or s3://bucket/prefix.
    archive_uri: str  # published bundles and keys/
    sources_uri: str  # immutable source revisions
    staging_uri: str  # unsigned reports between render, gate and signing
    preview_uri: str  # preview-lane renderings: never signed, never in the archive
    keys_dir: Path  # private key material, never inside the archive
    witness_key: Path | None  # the checkpoints' co-signer (Ed25519 private key, 0600), never in keys_dir or archive
    pades_level: str
    tsa_url: str | None
    signature_trust_roots: Path | None  # PEM certificates the signature check trusts beside the service's own root
    policy_version: str
    s3_endpoint_url: str | None
    s3_region: str | None
    s3_object_lock_mode: str | None
    s3_object_lock_days: int
    s3_server_side_encryption: str | None
    s3_kms_key_id: str | None
    work_dir: Path  # private per-attempt scratch directories
    lease_seconds: float  # an attempt that stops renewing loses its lease after this long
    max_attempts: int  # transient failures: attempts before a job is dead
    retry_budget_seconds: float  # transient failures: time since acceptance before a job is dead
    retry_delay_seconds: float  # a document job's first wait in retry_wait; each later wait doubles
    processor_memory_mb: int  # how far a document worker process's address space may grow (documents/isolation.py)
    processor_seconds: float  # how long a document worker process may run before it is killed
    workers: int | None  # EVIDENCE_WORKERS: worker processes for many items at once; None: see worker_processes
    oversize_bytes: int  # source revisions larger than this go to the oversize lane
    oversize_workers: int  # the oversize lane's lower cap, within a run
    pool_wait_seconds: float  # how long an in-process run (`evidence demo`) may wait for a Dagster pool slot
    generate_dev_keys: bool  # missing keys: generate development keys (True) or refuse (KEY_MATERIAL_INVALID)
    dagster_home_override: Path | None  # DAGSTER_HOME when the operator set it
    dagster_pg_url: str | None  # PostgreSQL for Dagster's storage (dagster.production.yaml)
    documents_uri: str  # uploaded documents (intake): private, put-once, content-addressed
    intake_max_bytes: int  # the largest document intake admits
    document_page_size: int  # document jobs per dispatch page (one Dagster run)
    tenant_max_jobs: int  # quota: a tenant's outstanding (not yet terminal) document jobs
    tenant_max_bytes: int  # quota: a tenant's stored document bytes
    intake_max_queue_age_seconds: float  # backpressure: a tenant's new jobs wait while its oldest unstarted is older
    intake_max_queued_jobs: int  # backpressure: every tenant's outstanding jobs together (true overload)
    # the front door's connection limits (intake/guard.py; README "Connection limits")
    intake_max_headers: int  # headers per request (431)
    intake_max_header_bytes: int  # request line and headers together (431)
    intake_header_timeout_seconds: float  # connection (or a request's first byte) to its last header (408)
    intake_min_body_rate: int  # bytes/s a body keeps up after a grace of the header timeout (408)
    intake_request_timeout_seconds: float  # last header to the end of the answer (408)
    intake_max_connections: int  # per server process, at most its descriptor limit less a reserve (503)
    intake_max_uploads: int  # uploads in flight per server process (503)
    intake_tenant_max_uploads: int  # ... of one tenant (503)
    open_months: int  # the last complete months that are open (Dagster partitions); older ones are closed
    first_period: str  # the first month this deployment publishes evidence for: no month before it is ever open
    action_max_age_seconds: float  # how far a signed actor request's time may be from the service's clock
    actor_key: Path | None  # EVIDENCE_ACTOR_KEY: the actor's own private key that the CLI signs with (--key wins)

    def worker_processes(self, sharing: int = 1) -> int:
        """EVIDENCE_WORKERS, or by default this process's share of the CPUs it may use when ``sharing`` processes
        like it fork workers on the same host at once (at least 1)."""
        return self.workers or max(1, len(os.sched_getaffinity(0)) // sharing)

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
            staging_uri=store("EVIDENCE_STAGING_URI", home / "staging"),
            preview_uri=store("EVIDENCE_PREVIEW_URI", home / "previews"),
            keys_dir=keys_dir,
            witness_key=witness_key,
            pades_level=level,
            tsa_url=tsa_url,
            signature_trust_roots=(
                Path(env["EVIDENCE_SIGNATURE_TRUST_ROOTS"]).absolute() if env.get("EVIDENCE_SIGNATURE_TRUST_ROOTS")
                else None
            ),
            policy_version=env.get("EVIDENCE_POLICY_VERSION", "policy-2026.1"),
            s3_endpoint_url=env.get("EVIDENCE_S3_ENDPOINT_URL") or None,
            s3_region=env.get("EVIDENCE_S3_REGION") or env.get("AWS_REGION") or None,
            s3_object_lock_mode=lock_mode,
            s3_object_lock_days=int(lock_days),
            s3_server_side_encryption=env.get("EVIDENCE_S3_SSE") or None,
            s3_kms_key_id=env.get("EVIDENCE_S3_KMS_KEY_ID") or None,
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
            open_months=open_months(env),
            first_period=first_period(env),
            action_max_age_seconds=_positive(env, "EVIDENCE_ACTION_MAX_AGE_SECONDS", 300),
            actor_key=actor_key,
        )
        archive = None if settings.archive_uri.startswith("s3://") else Path(settings.archive_uri)
        if witness_key is not None and archive in witness_key.parents:
            raise EvidenceError(ReasonCode.CONFIG_INVALID, "EVIDENCE_WITNESS_KEY must not be inside the archive")
        if actor_key is not None and archive in actor_key.parents:
            raise EvidenceError(ReasonCode.CONFIG_INVALID, "EVIDENCE_ACTOR_KEY must not be inside the archive")
        return settings


def open_months(environ: dict[str, str] | None = None) -> int:
    """EVIDENCE_OPEN_MONTHS alone (the code location reads it when it loads, and must not depend on the rest)."""
    return _whole(os.environ if environ is None else environ, "EVIDENCE_OPEN_MONTHS", 12)


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


def _flag(env, name: str, default: bool) -> bool:
    value = env.get(name, "1" if default else "0")
    if value not in ("0", "1"):
        raise EvidenceError(ReasonCode.CONFIG_INVALID, f"{name} must be 0 or 1")
    return value == "1"


def _whole(env, name: str, default: int) -> int:
    value = str(env.get(name, default))
    if not value.isdigit() or int(value) < 1:
        raise EvidenceError(ReasonCode.CONFIG_INVALID, f"{name} must be a whole number >= 1")
    return int(value)
