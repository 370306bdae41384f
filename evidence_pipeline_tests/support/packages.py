"""Offline audit packages read and altered as someone holding a copy could."""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import sqlalchemy as sa

from evidence_pipeline.runtime import Runtime
from evidence_pipeline.signing import dsse


def unreachable(runtime, backend: dict, tmp_path: Path) -> None:
    """Make the ledger and the archive go away: the local home is deleted; the PostgreSQL database is dropped (the
    S3 bucket cannot be emptied under Object Lock: the verifying process gets no S3 settings or credentials and
    must not even import boto3)."""
    runtime.ledger.engine.dispose()
    if "EVIDENCE_LEDGER_URL" in backend:
        url = sa.make_url(backend["EVIDENCE_LEDGER_URL"])
        admin = sa.create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE "{url.database}" WITH (FORCE)'))
        admin.dispose()
    shutil.rmtree(backend["EVIDENCE_HOME"])


LOADED = """
import json, sys
from evidence_pipeline.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    print(json.dumps({"exit": exit.code, "modules": sorted({name.split(".")[0] for name in sys.modules})}))
"""


def writable(path: Path) -> Path:
    os.chmod(path, 0o644)
    return path


def edit_json(path: Path, change) -> None:
    document = json.loads(writable(path).read_bytes())
    change(document)
    path.write_text(json.dumps(document, indent=2, sort_keys=True))


def read_index(package: Path) -> dict:
    """The index inside package.json's signed statement."""
    return json.loads(base64.b64decode(json.loads((package / "package.json").read_bytes())["payload"]))["predicate"]


def index_edited(path: Path, change, runtime: Runtime | None = None) -> None:
    """The index changed inside its envelope, the signature kept (with ``runtime``: signed again with its statement
    key, as the exporter would have signed it)."""

    def edit(envelope):
        statement = json.loads(base64.b64decode(envelope["payload"]))
        change(statement["predicate"])
        envelope["payload"] = base64.b64encode(dsse.canonical_json(statement)).decode()
        if runtime is not None:
            envelope.update(
                json.loads(
                    dsse.sign_envelope(
                        base64.b64decode(envelope["payload"]),
                        runtime.keyring.statement_key,
                        runtime.keyring.statement_key_id,
                    )
                )
            )

    edit_json(path, edit)


def swapped(one: Path, other: Path) -> None:
    """Two files of the package trade places: each is a genuine file of the export, at the other's path."""
    first = writable(one).read_bytes()
    one.write_bytes(writable(other).read_bytes())
    other.write_bytes(first)
