"""What commands open, each only when a command calls for it: the settings, the runtime, an archive, the audit
ledger, the intake ledger and the Dagster home."""

from __future__ import annotations

import difflib
import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.paths import private_dirs

if TYPE_CHECKING:
    from evidence_pipeline.ledger import Ledger
    from evidence_pipeline.store import ArtifactStore

REPO_ROOT = Path(__file__).resolve().parents[2]


def load_settings(reads_only: bool = False) -> Settings:
    """The settings. A command that only reads, from the embedded default's ledger, needs the home that holds it:
    run where there is none (outside the repository, say), it says so instead of creating an empty home and
    answering from it."""
    settings = Settings.from_env()
    embedded = settings.ledger_url == f"sqlite:///{settings.home / 'ledger.sqlite'}"
    if reads_only and embedded and not settings.home.is_dir():
        raise EvidenceError(
            ReasonCode.HOME_NOT_FOUND,
            "EVIDENCE_HOME names no folder (unset, it is ./.evidence): set "
            "it to your deployment's home, or run `evidence demo` first",
        )
    return settings


def use_dagster_home(settings: Settings) -> Path:
    """DAGSTER_HOME defaults to $EVIDENCE_HOME/dagster, seeded with the repository's dagster.yaml, or with
    dagster.production.yaml (PostgreSQL storage) when DAGSTER_PG_URL is set (seed_instance_file)."""
    home = settings.dagster_home
    if settings.dagster_home_override is None:
        config = "dagster.production.yaml" if settings.dagster_pg_url else "dagster.yaml"
        private_dirs(home)  # Dagster's SQLite databases live here: owner-only
        seed_instance_file(REPO_ROOT / config, home / "dagster.yaml")
    # Dagster finds its instance through the environment, in this process and in those it starts (`evidence ui`).
    os.environ["DAGSTER_HOME"] = str(home)
    return home


WRITTEN = ".dagster.yaml.sha256"  # beside the instance file: the SHA-256 of the one this project last wrote


def seed_instance_file(template: Path, target: Path) -> None:
    """The instance file is the repository's where there is none, or where it is still the one this project wrote
    (a new release's settings then replace it). One edited since, or written by someone else, is kept: what differs
    from the repository's is said on stderr instead."""
    from evidence_pipeline.tempfiles import write_private

    wanted = template.read_bytes()
    written = target.with_name(WRITTEN)
    if target.exists():
        current = target.read_bytes()
        if current == wanted:
            return
        if not written.exists() or written.read_text().strip() != hashlib.sha256(current).hexdigest():
            difference = list(
                difflib.unified_diff(
                    wanted.decode().splitlines(),
                    current.decode().splitlines(),
                    f"{template.name} (the repository's)",
                    f"{target.name} (kept)",
                    lineterm="",
                    n=0,
                )
            )
            shown = "\n".join(difference[:40]) + ("\n…" if len(difference) > 40 else "")
            click.echo(
                f"Keeping the instance's {target.name}: it was edited, and differs from the repository's "
                f"{template.name}:\n{shown}",
                err=True,
            )
            return
    staged = target.with_name(f".{target.name}.{os.getpid()}")
    staged.unlink(missing_ok=True)
    write_private(staged, wanted)
    os.replace(staged, target)
    written.write_text(hashlib.sha256(wanted).hexdigest() + "\n")


def open_archive(root: str) -> ArtifactStore:
    """The store of an archive root that `locations.locate` found (each worker process opens its own)."""
    if root.startswith("s3://"):
        from evidence_pipeline.store.uri import open_store  # boto3: only for an archive on S3

        return open_store(root, _s3_client(load_settings()))
    from evidence_pipeline.store.local import LocalStore

    return LocalStore(Path(root))


def _s3_client(settings: Settings):
    from evidence_pipeline.runtime import s3_client  # the runtime (ledger, boto3) only when a command needs it

    return s3_client(settings)


def open_runtime(settings: Settings):
    from evidence_pipeline.runtime import runtime_for  # the ledger and the stores only when a command needs them

    return runtime_for(settings)


def open_audit(settings: Settings) -> tuple[Ledger, ArtifactStore]:
    """The ledger, opened read-only, and the archive: what verification and proofs read, and never write."""
    from evidence_pipeline.ledger import Ledger

    return Ledger(settings.ledger_url, read_only=True), open_archive(settings.archive_uri)


def intake_ledger():
    return open_runtime(load_settings()).ledger
