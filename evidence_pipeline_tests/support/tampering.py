"""What someone with write access to the archive or the database would do to the evidence."""

from __future__ import annotations

import os

import sqlalchemy as sa

from evidence_pipeline.ledger.append_only import drop_guards
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.store import ArtifactStore
from evidence_pipeline.store.local import LocalStore


def overwrite(runtime: Runtime, key: str, data: bytes | None, store: ArtifactStore | None = None) -> None:
    """Tamper with the archive (or ``store``) as someone with write access would (``None`` deletes)."""
    store = store or runtime.archive
    if isinstance(store, LocalStore):
        path = store.root / key
        os.chmod(path, 0o644)
        path.unlink() if data is None else path.write_bytes(data)
    elif data is None:
        store.client.delete_object(Bucket=store.bucket, Key=store._key(key))  # a delete marker
    else:
        store.client.put_object(Bucket=store.bucket, Key=store._key(key), Body=data)  # a new version


def drop_append_only_guards(ledger, table: str = "evidence_audit_events") -> None:
    """What an attacker with DDL rights would do first: remove the triggers that refuse UPDATE and DELETE."""
    with ledger.engine.begin() as conn:
        for statement in drop_guards(ledger.engine.dialect.name, table):
            conn.execute(sa.text(statement))
