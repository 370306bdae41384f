"""Settings from the environment. The embedded default keeps everything under $EVIDENCE_HOME."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from evidence_pipeline.errors import EvidenceError

PADES_LEVELS = ("B-B", "B-T")


@dataclass(frozen=True)
class Settings:
    home: Path
    ledger_url: str
    archive_root: Path
    keys_dir: Path  # private key material, never inside the archive
    work_dir: Path  # per-attempt scratch space and staged (unsigned) reports
    sources_dir: Path
    tenant_registry: Path
    pades_level: str
    tsa_url: str | None
    policy_version: str

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        home = Path(env.get("EVIDENCE_HOME", ".evidence")).absolute()
        level = env.get("EVIDENCE_PADES_LEVEL", "B-B")
        if level not in PADES_LEVELS:
            raise EvidenceError("CONFIG_INVALID", f"EVIDENCE_PADES_LEVEL must be one of {', '.join(PADES_LEVELS)}")
        tsa_url = env.get("EVIDENCE_TSA_URL") or None
        if level == "B-T" and not tsa_url:
            raise EvidenceError("CONFIG_INVALID", "PAdES B-T needs EVIDENCE_TSA_URL (an RFC 3161 time stamp authority)")
        return cls(
            home=home,
            ledger_url=env.get("EVIDENCE_LEDGER_URL", f"sqlite:///{home / 'ledger.sqlite'}"),
            archive_root=Path(env.get("EVIDENCE_ARCHIVE_DIR", home / "archive")).absolute(),
            keys_dir=Path(env.get("EVIDENCE_KEYS_DIR", home / "keys")).absolute(),
            work_dir=home / "work",
            sources_dir=Path(env.get("EVIDENCE_SOURCES_DIR", home / "sources")).absolute(),
            tenant_registry=Path(env.get("EVIDENCE_TENANT_REGISTRY", home / "tenants.txt")).absolute(),
            pades_level=level,
            tsa_url=tsa_url,
            policy_version=env.get("EVIDENCE_POLICY_VERSION", "policy-2026.1"),
        )
