"""Signed Merkle checkpoints make the ledger tamper-evident even against someone who can rewrite the database."""

import json

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519
from sqlalchemy import select, update

from evidence_pipeline.audit.checkpoints import (
    PAYLOAD_TYPE,
    checkpoint_key,
    prove_bundle,
    publish_checkpoint,
    verify_ledger,
)
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.ledger import GENESIS_HASH
from evidence_pipeline.ledger.chain import chain_hash
from evidence_pipeline.ledger.mirrors import EVENT_COLUMNS
from evidence_pipeline.monthly.pipeline import run_tenant_month
from evidence_pipeline.runtime import RunInfo
from evidence_pipeline.signing import dsse
from evidence_pipeline_tests.support.fixture_sources import FIXTURE_EVENTS, LARGE, SMALL
from evidence_pipeline_tests.support.tampering import drop_append_only_guards, overwrite

FIXTURES = FIXTURE_EVENTS  # the events before the test's
SIZE = FIXTURES + 16  # after the two tenant-months of ``checkpointed``


@pytest.fixture
def checkpointed(runtime):
    first = run_tenant_month(runtime, SMALL, RunInfo("run-1"))
    publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring)
    second = run_tenant_month(runtime, LARGE, RunInfo("run-2"))
    publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring)
    return first, second


def _code(call) -> str:
    with pytest.raises(EvidenceError) as error:
        call()
    return error.value.code


def test_checkpoints_verify_and_prove_inclusion(runtime, checkpointed):
    report = verify_ledger(runtime.ledger, runtime.archive)
    # the fixture months' `source.published` events, then 8 events per tenant-month
    assert report == {"events": SIZE, "checkpoints": [FIXTURES + 8, SIZE], "unchecked_tail": 0}
    for publication in checkpointed:
        proof = prove_bundle(runtime.ledger, runtime.archive, publication.bundle_key)
        assert proof["tree_size"] == SIZE and proof["leaf_index"] in (FIXTURES + 6, FIXTURES + 14)
    again = publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring)  # nothing new: same checkpoint
    assert again["size"] == SIZE and len(runtime.archive.list("ledger/checkpoints")) == 2


def test_an_event_after_the_newest_checkpoint_has_no_proof_yet(runtime):
    publication = run_tenant_month(runtime, SMALL, RunInfo("run-1"))
    assert (
        _code(lambda: prove_bundle(runtime.ledger, runtime.archive, publication.bundle_key))
        == "LEDGER_NOT_CHECKPOINTED"
    )


def test_a_manifest_pointing_at_another_bundles_event_proves_nothing(runtime, checkpointed):
    first, second = checkpointed
    key = f"{first.bundle_key}/manifest.json"
    manifest = json.loads(runtime.archive.get(key))
    manifest["ledger"] = json.loads(runtime.archive.get(f"{second.bundle_key}/manifest.json"))["ledger"]
    overwrite(runtime, key, json.dumps(manifest).encode())
    assert _code(lambda: prove_bundle(runtime.ledger, runtime.archive, first.bundle_key)) == "LEDGER_INVALID"
    overwrite(runtime, key, b"{")
    assert _code(lambda: prove_bundle(runtime.ledger, runtime.archive, first.bundle_key)) == "MANIFEST_INVALID"


def _rechain(runtime, bodies_by_seq: dict[int, str] | None = None, delete_seq: int | None = None) -> None:
    """Rewrite history the way a capable attacker would: edit rows, then recompute every later hash."""
    ledger = runtime.ledger
    events = ledger.audit_events
    drop_append_only_guards(ledger)
    with ledger.engine.begin() as conn:
        if delete_seq is not None:
            conn.execute(events.delete().where(events.c.seq == delete_seq))
        rows = conn.execute(select(events.c.seq, events.c.body).order_by(events.c.seq)).all()
        # Park prev_hash and event_id on unique placeholders so the rewrite never trips a UNIQUE halfway.
        conn.execute(
            update(events).values(
                prev_hash=events.c.seq.cast(events.c.prev_hash.type), event_id=events.c.seq.cast(events.c.event_id.type)
            )
        )
        prev = GENESIS_HASH
        for seq, body in rows:
            body = (bodies_by_seq or {}).get(seq, body)
            fields = json.loads(body)
            event_hash = chain_hash(prev, body)
            conn.execute(
                update(events)
                .where(events.c.seq == seq)
                .values(
                    body=body,
                    prev_hash=prev,
                    event_hash=event_hash,
                    **{c: fields[c] for c in EVENT_COLUMNS},
                )
            )
            prev = event_hash
    assert ledger.verify_chain() > 0  # the hash chain alone is fooled ...


def test_a_rewritten_and_rechained_event_is_detected(runtime, checkpointed):
    body = runtime.ledger.event(3).body
    _rechain(runtime, {3: json.dumps(body | {"actor": "someone-else"}, sort_keys=True, separators=(",", ":"))})
    assert _code(lambda: verify_ledger(runtime.ledger, runtime.archive)) == "LEDGER_INVALID"  # ... the tree is not


def test_a_deleted_and_rechained_event_is_detected(runtime, checkpointed):
    _rechain(runtime, delete_seq=2)
    assert _code(lambda: verify_ledger(runtime.ledger, runtime.archive)) == "LEDGER_INVALID"


def test_reordered_events_are_detected(runtime, checkpointed):
    # the last two fixture events, two `source.published` (a mirror of the registry pins each `tenant.registered`)
    first, second = FIXTURES - 1, FIXTURES
    one, other = runtime.ledger.event(first).body, runtime.ledger.event(second).body
    canonical = lambda b: json.dumps(b, sort_keys=True, separators=(",", ":"))  # noqa: E731
    _rechain(runtime, {first: canonical(other), second: canonical(one)})
    assert _code(lambda: verify_ledger(runtime.ledger, runtime.archive)) == "LEDGER_INVALID"


def test_a_forged_checkpoint_is_detected(runtime, checkpointed):
    forged = {
        "origin": "evidence_pipeline audit ledger",
        "size": SIZE,
        "root_sha256": "00" * 32,
        "issued_at": "2026-11-30T00:00:00+00:00",
        "key_id": runtime.keyring.statement_key_id,
    }
    envelope = dsse.sign_envelope(
        dsse.canonical_json(forged),
        ed25519.Ed25519PrivateKey.generate(),
        runtime.keyring.statement_key_id,
        PAYLOAD_TYPE,
    )
    overwrite(runtime, checkpoint_key(SIZE), envelope)
    assert _code(lambda: verify_ledger(runtime.ledger, runtime.archive)) == "LEDGER_INVALID"


@pytest.mark.parametrize("field", ["published_at", "extra"])
def test_the_ledger_vouches_for_the_whole_manifest(runtime, checkpointed, field):
    first, _ = checkpointed
    key = f"{first.bundle_key}/manifest.json"
    manifest = json.loads(runtime.archive.get(key))
    if field == "extra":
        manifest["approved_by"] = "the auditor"
    else:
        manifest["ledger"]["published_at"] = "2020-01-01T00:00:00+00:00"
    overwrite(runtime, key, json.dumps(manifest, indent=2, sort_keys=True).encode())
    assert _code(lambda: prove_bundle(runtime.ledger, runtime.archive, first.bundle_key)) == "LEDGER_INVALID"
