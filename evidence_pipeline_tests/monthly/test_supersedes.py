"""Corrections link: a bundle published for a tenant-month that already has one supersedes it, linearly.

On both backends (SQLite + local archive, PostgreSQL + S3 with Object Lock): the link in the statement, manifest
and ledger event; `evidence verify` on a superseded bundle; tampering; racing and crashed publishers.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import threading
import time

import pytest
from click.testing import CliRunner

from evidence_pipeline.audit.verify import verify_bundle
from evidence_pipeline.cli import main
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.ledger.jobs import Lease
from evidence_pipeline.models import EventType
from evidence_pipeline.monthly.bundle import MANIFEST, REPORT, STATEMENT, bundle_identity, bundle_prefix
from evidence_pipeline.monthly.pipeline import pin_source, publish_stage, render_and_gate, run_tenant_month
from evidence_pipeline.runtime import RunInfo
from evidence_pipeline.signing import dsse
from evidence_pipeline.synthetic.demo_data import demo_transactions
from evidence_pipeline_tests.support.fixture_sources import SMALL, publish_revision
from evidence_pipeline_tests.support.signers import Signers
from evidence_pipeline_tests.support.tampering import overwrite

RUN = RunInfo("supersedes")


def _correct_the_source(runtime, cents: int = 100):
    """A new source revision of SMALL: one amount corrected."""
    corrected = demo_transactions(SMALL)
    corrected.loc[0, "amount_minor"] += cents
    return publish_revision(runtime, SMALL, corrected)


def _predicate(runtime, publication) -> dict:
    envelope = json.loads(runtime.archive.get(f"{publication.bundle_key}/{STATEMENT}"))
    return json.loads(base64.b64decode(envelope["payload"]))["predicate"]


def _manifest(runtime, publication) -> dict:
    return json.loads(runtime.archive.get(f"{publication.bundle_key}/{MANIFEST}"))


def _published_event(runtime, publication) -> dict:
    return runtime.ledger.event(publication.ledger_seq).body["details"]


def _folder(runtime, bundle_key: str) -> str:
    """What an auditor passes to `evidence verify`: the bundle's folder, or its s3:// URI."""
    uri = runtime.archive.uri(bundle_key)
    return str(runtime.archive.root / bundle_key) if uri.startswith("archive://") else uri


def _with(runtime, **settings):
    """The same stores and ledger under other settings (a policy version, a short lease)."""
    return dataclasses.replace(runtime, settings=dataclasses.replace(runtime.settings, **settings))


def _link(publication) -> dict:
    return {"identity": publication.identity, "prefix": publication.bundle_key}


def test_a_new_source_revision_supersedes_the_current_bundle(runtime):
    first = run_tenant_month(runtime, SMALL, RUN)
    assert first.supersedes is None and first.current_identity == first.identity
    assert "supersedes" not in _predicate(runtime, first) and "supersedes" not in _manifest(runtime, first)
    assert "supersedes" not in _published_event(runtime, first)

    _correct_the_source(runtime)
    second = run_tenant_month(runtime, SMALL, RunInfo("corrected"))
    link = {"identity": first.identity, "prefix": first.bundle_key, "reason": ["source_revision"]}
    assert second.created and second.identity != first.identity and second.supersedes == link
    # the link is signed in the statement, repeated in the manifest (and its lineage) and in the ledger event
    assert _predicate(runtime, second)["supersedes"] == link
    manifest = _manifest(runtime, second)
    assert manifest["supersedes"] == link
    assert manifest["lineage"][0] == {"step": "supersedes", "identity": first.identity, "reason": ["source_revision"]}
    assert _published_event(runtime, second)["supersedes"] == link
    assert runtime.ledger.current_publication(SMALL).identity == second.current_identity == second.identity

    # re-running converges on the current bundle: exactly once, and it never supersedes itself
    again = run_tenant_month(runtime, SMALL, RunInfo("again"))
    assert not again.created and again.identity == second.identity and again.supersedes == link
    assert len({key.rsplit("/", 1)[0] for key in runtime.archive.list(f"bundles/{SMALL.tenant}")}) == 2
    assert runtime.ledger.verify_chain() > 0

    old, new = verify_bundle(runtime.archive, first.bundle_key), verify_bundle(runtime.archive, second.bundle_key)
    assert old.ok and old.current is False and old.supersedes is None
    assert old.superseded_by == old.current_bundle == _link(second)
    assert new.ok and new.current is True and new.superseded_by is None and new.current_bundle == _link(second)
    assert new.supersedes == link | {"in_archive": True}


def test_verify_reports_a_superseded_bundle_as_valid_but_not_current(runtime):
    first = run_tenant_month(runtime, SMALL, RUN)
    _correct_the_source(runtime)
    second = run_tenant_month(runtime, SMALL, RunInfo("corrected"))

    human = CliRunner().invoke(main, ["verify", _folder(runtime, first.bundle_key)])
    assert human.exit_code == 0, human.output
    assert f"superseded by {second.identity}" in human.output
    assert human.output.rstrip().endswith(
        f"VERIFIED but SUPERSEDED by {second.identity}: valid, not the current bundle"
    )
    as_json = CliRunner().invoke(main, ["verify", _folder(runtime, first.bundle_key), "--json"])
    document = json.loads(as_json.output)
    assert as_json.exit_code == 0 and document["ok"] is True and document["current"] is False
    assert document["superseded_by"] == document["current_bundle"] == _link(second)

    current = CliRunner().invoke(main, ["verify", _folder(runtime, second.bundle_key)])
    assert current.exit_code == 0 and f"supersedes {first.identity} (source_revision)" in current.output
    assert current.output.rstrip().endswith("VERIFIED")
    # a whole tenant-month: one line per bundle, the superseded one says so
    month = CliRunner().invoke(main, ["verify", _folder(runtime, first.bundle_key).rsplit("/", 1)[0]])
    assert month.exit_code == 0 and f"(superseded; current: {second.identity[:12]})" in month.output
    assert "2 bundles: 2 verified (1 of them superseded by a newer bundle)" in month.output


def test_the_chain_is_followed_to_the_current_bundle_with_each_reason(runtime):
    first = run_tenant_month(runtime, SMALL, RUN)
    _correct_the_source(runtime)
    second = run_tenant_month(runtime, SMALL, RunInfo("corrected"))
    third = run_tenant_month(_with(runtime, policy_version="policy-2027.1"), SMALL, RunInfo("new-policy"))
    assert third.supersedes["identity"] == second.identity and third.supersedes["reason"] == ["policy_version"]

    old = verify_bundle(runtime.archive, first.bundle_key)
    assert old.ok and old.superseded_by == _link(second) and old.current_bundle == _link(third)
    middle = verify_bundle(runtime.archive, second.bundle_key)
    assert middle.ok and middle.superseded_by == middle.current_bundle == _link(third)
    assert verify_bundle(runtime.archive, third.bundle_key).current is True


def test_tampering_with_the_supersedes_link_breaks_the_signature_check(runtime):
    first = run_tenant_month(runtime, SMALL, RUN)
    _correct_the_source(runtime)
    second = run_tenant_month(runtime, SMALL, RunInfo("corrected"))
    key = f"{second.bundle_key}/{STATEMENT}"
    original = runtime.archive.get(key)
    envelope = json.loads(original)
    statement = json.loads(base64.b64decode(envelope["payload"]))
    for edit in ("reason", "drop"):
        edited = json.loads(json.dumps(statement))
        if edit == "reason":
            edited["predicate"]["supersedes"]["reason"] = ["policy_version"]
        else:
            del edited["predicate"]["supersedes"]  # pretend it was the tenant-month's first bundle
        envelope["payload"] = base64.b64encode(dsse.canonical_json(edited)).decode()
        overwrite(runtime, key, json.dumps(envelope).encode())
        assert verify_bundle(runtime.archive, second.bundle_key).codes == ["STATEMENT_SIGNATURE_INVALID"]
        # a successor whose statement does not verify does not make its predecessor look superseded
        assert verify_bundle(runtime.archive, first.bundle_key).current is True
    overwrite(runtime, key, original)
    assert verify_bundle(runtime.archive, first.bundle_key).superseded_by == _link(second)

    # the manifest repeats the signed link: editing it there alone is a mismatch
    manifest = _manifest(runtime, second)
    manifest["supersedes"]["reason"] = ["renderer_version"]
    overwrite(runtime, f"{second.bundle_key}/{MANIFEST}", json.dumps(manifest, indent=2, sort_keys=True).encode())
    assert verify_bundle(runtime.archive, second.bundle_key).codes == ["MANIFEST_STATEMENT_MISMATCH"]


def test_a_predecessor_missing_from_the_archive_is_reported_not_failed(runtime):
    first = run_tenant_month(runtime, SMALL, RUN)
    _correct_the_source(runtime)
    second = run_tenant_month(runtime, SMALL, RunInfo("corrected"))
    for name in (MANIFEST, STATEMENT, REPORT):
        overwrite(runtime, f"{first.bundle_key}/{name}", None)
    result = verify_bundle(runtime.archive, second.bundle_key)
    assert result.ok and result.supersedes["identity"] == first.identity and result.supersedes["in_archive"] is False
    cli = CliRunner().invoke(main, ["verify", _folder(runtime, second.bundle_key)])
    assert cli.exit_code == 0 and "that bundle is not in this archive" in cli.output


def test_two_published_bundles_superseding_the_same_one_are_a_fork(runtime):
    """Only the statement key can sign a second successor: a fork is a publisher's defect or a stolen key."""
    first = run_tenant_month(runtime, SMALL, RUN)
    _correct_the_source(runtime)
    second = run_tenant_month(runtime, SMALL, RunInfo("corrected"))
    forged = _predicate(runtime, second) | {"policy_version": "forged"}
    forged["identity"] = bundle_identity(forged)
    prefix = bundle_prefix(SMALL, forged["identity"])
    keyring = runtime.keyring
    payload = dsse.canonical_json(dsse.statement(REPORT, second.report_sha256, forged))
    runtime.archive.put_once(
        f"{prefix}/{STATEMENT}", dsse.sign_envelope(payload, keyring.statement_key, keyring.statement_key_id)
    )
    runtime.archive.put_once(f"{prefix}/{MANIFEST}", runtime.archive.get(f"{second.bundle_key}/{MANIFEST}"))
    assert "SUPERSEDES_FORKED" in verify_bundle(runtime.archive, first.bundle_key).codes
    assert verify_bundle(runtime.archive, second.bundle_key).ok  # nothing forks after it


class _SlowStatements:
    """The same archive, except that storing a statement takes a while: racing publishers overlap."""

    def __init__(self, store, seconds: float):
        self._store, self._seconds = store, seconds

    def put_file(self, key, file):
        if key.endswith(STATEMENT):
            time.sleep(self._seconds)
        return self._store.put_file(key, file)

    def __getattr__(self, name):
        return getattr(self._store, name)


def _gated(runtime, run: RunInfo):
    """Pin SMALL's latest revision and pass its report through the gate: ready to publish."""
    pinned = pin_source(runtime, SMALL, run)
    return pinned, render_and_gate(runtime, pinned, run).staged.sha256


def test_racing_publishers_of_one_tenant_month_make_a_linear_chain(runtime):
    first = run_tenant_month(runtime, SMALL, RUN)
    ready = []
    for cents in (100, 200):  # two corrections, each pinned before the next is published
        _correct_the_source(runtime, cents)
        ready.append(_gated(runtime, RunInfo(f"pin-{cents}")))
    slow = dataclasses.replace(runtime, archive=_SlowStatements(runtime.archive, 0.5))
    start = threading.Barrier(len(ready))
    results: dict[int, object] = {}

    def publish(index: int) -> None:
        pinned, unsigned_sha256 = ready[index]
        start.wait()
        try:
            results[index] = publish_stage(slow, pinned, unsigned_sha256, RunInfo(f"racer-{index}"))
        except Exception as error:  # reported below
            results[index] = error

    threads = [threading.Thread(target=publish, args=(index,)) for index in range(len(ready))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    publications = list(results.values())
    assert all(not isinstance(p, Exception) for p in publications), publications
    assert all(p.created for p in publications)
    # each new bundle superseded exactly the current one: first <- winner <- loser, never two on first
    [winner] = [p for p in publications if p.supersedes["identity"] == first.identity]
    [loser] = [p for p in publications if p is not winner]
    assert loser.supersedes["identity"] == winner.identity
    assert runtime.ledger.current_publication(SMALL).identity == loser.identity
    assert runtime.ledger.verify_chain() > 0
    oldest = verify_bundle(runtime.archive, first.bundle_key)
    assert oldest.ok and oldest.superseded_by == _link(winner) and oldest.current_bundle == _link(loser)
    links = [e["details"].get("supersedes") for e in runtime.ledger.events_of_type(EventType.BUNDLE_PUBLISHED)]
    assert [link and link["identity"] for link in links] == [None, first.identity, winner.identity]


class _DiesAt:
    """The same archive, except that the process 'dies' (an exception no stage catches) right before storing
    ``name`` (a statement not yet written), or right after (a statement stored, never committed)."""

    def __init__(self, store, name: str, after: bool):
        self._store, self._name, self._after, self.died = store, name, after, False

    def put_file(self, key, file):
        if key.endswith(self._name) and not self.died:
            self.died = True
            if self._after:
                self._store.put_file(key, file)
            raise KeyboardInterrupt("the worker died")
        return self._store.put_file(key, file)

    def __getattr__(self, name):
        return getattr(self._store, name)


@pytest.mark.parametrize("died", ["before-statement", "after-statement"])
def test_a_publisher_that_died_holding_the_tenant_month_does_not_block_or_fork_it(runtime, died):
    runtime = _with(runtime, lease_seconds=1.0)
    first = run_tenant_month(runtime, SMALL, RUN)
    _correct_the_source(runtime, 100)
    dead_pinned, dead_unsigned = _gated(runtime, RunInfo("dead"))
    dying = dataclasses.replace(runtime, archive=_DiesAt(runtime.archive, STATEMENT, died == "after-statement"))
    with pytest.raises(KeyboardInterrupt):
        publish_stage(dying, dead_pinned, dead_unsigned, RunInfo("dead"))
    dead_identity = _identity_of(runtime)  # it claimed the tenant-month before it died
    assert runtime.archive.exists(f"{bundle_prefix(SMALL, dead_identity)}/{STATEMENT}") == (died == "after-statement")

    _correct_the_source(runtime, 200)
    live_pinned, live_unsigned = _gated(runtime, RunInfo("live"))
    live = publish_stage(runtime, live_pinned, live_unsigned, RunInfo("live"))  # waits out the dead lease
    assert live.created
    if died == "after-statement":
        # its signed statement names `first`: it is committed first (by the live run), then superseded
        dead = runtime.ledger.publication(dead_identity)
        assert dead is not None and runtime.ledger.job(dead_pinned.job_id).state == "succeeded"
        assert live.supersedes["identity"] == dead.identity
        assert runtime.ledger.event(dead.event_seq).body["actor"] == "live"
        assert verify_bundle(runtime.archive, dead.bundle_key).superseded_by == _link(live)
    else:
        # nothing was signed under its claim: the live run takes over; the dead one's retry supersedes it later
        assert live.supersedes["identity"] == first.identity
        retried = publish_stage(runtime, dead_pinned, dead_unsigned, RunInfo("dead", attempt=2))
        assert retried.created and retried.supersedes["identity"] == live.identity
    assert runtime.ledger.verify_chain() > 0
    assert verify_bundle(runtime.archive, first.bundle_key).ok


def _identity_of(runtime) -> str:
    """The identity of the bundle whose claim a test left behind (the only claim row)."""
    with runtime.ledger.engine.connect() as conn:
        [row] = conn.execute(runtime.ledger.claims.select()).all()
    return row.identity


def test_a_statement_of_a_closed_job_cannot_fork_the_chain(runtime, tmp_path):
    """A job closed after it stored its signed statement (here: rejected) is not completed by others; the
    tenant-month moves on, and a replay of that job fails with SUPERSEDES_STALE instead of forking the chain."""
    runtime = _with(runtime, lease_seconds=1.0)
    first = run_tenant_month(runtime, SMALL, RUN)
    _correct_the_source(runtime, 100)
    stale_pinned, stale_unsigned = _gated(runtime, RunInfo("stale"))
    dying = dataclasses.replace(runtime, archive=_DiesAt(runtime.archive, STATEMENT, after=True))
    with pytest.raises(KeyboardInterrupt):
        publish_stage(dying, stale_pinned, stale_unsigned, RunInfo("stale"))
    time.sleep(1.1)  # its lease expires; an operator rejects the job
    assert (
        runtime.ledger.record_failure(
            stale_pinned.job_id,
            "STORE_CONFLICT",
            retryable=False,
            actor="operator",
            budget=runtime.retry_budget,
            attempt=1,
        )
        == "rejected"
    )

    _correct_the_source(runtime, 200)
    live = run_tenant_month(runtime, SMALL, RunInfo("live"))
    assert live.supersedes["identity"] == first.identity
    Signers(runtime.ledger, tmp_path / "actors").replay(stale_pinned.job_id, "try again")
    with pytest.raises(EvidenceError) as error:
        publish_stage(runtime, stale_pinned, stale_unsigned, RunInfo("replayed"))
    assert error.value.code == "SUPERSEDES_STALE" and not error.value.retryable
    assert runtime.ledger.current_publication(SMALL).identity == live.identity
    assert runtime.ledger.verify_chain() > 0


def test_the_ledger_refuses_a_commit_that_would_fork_the_chain(runtime):
    first = run_tenant_month(runtime, SMALL, RUN)
    _correct_the_source(runtime)
    second = run_tenant_month(runtime, SMALL, RunInfo("corrected"))
    ledger = runtime.ledger
    details = _published_event(runtime, second)
    row = {
        name: details[name]
        for name in (
            "identity",
            "tenant",
            "period",
            "bundle_key",
            "source_sha256",
            "unsigned_sha256",
            "report_sha256",
            "statement_sha256",
            "renderer_version",
            "key_id",
        )
    }
    forked = row | {"identity": "e" * 64, "bundle_key": bundle_prefix(SMALL, "e" * 64)}
    job = ledger.accept_job(dataclasses.replace(_job_key(details), policy_version="forked"), "test")
    lease = ledger.acquire_lease(job.job_id, "test", 60)
    # a statement that supersedes `first` again, or names nothing, is stale: `second` is current
    for supersedes in ({"identity": first.identity, "prefix": first.bundle_key, "reason": ["source_revision"]}, None):
        with pytest.raises(EvidenceError) as error:
            ledger.publish(forked, lease, "test", **(details | {"supersedes": supersedes}))
        assert error.value.code == "SUPERSEDES_STALE"
    # while another attempt holds the tenant-month's claim, nobody else commits
    other = ledger.accept_job(dataclasses.replace(_job_key(details), policy_version="other"), "test")
    other_lease = ledger.acquire_lease(other.job_id, "test", 60)
    assert ledger.claim_publication(SMALL, "d" * 64, other_lease).claimed
    refused = ledger.claim_publication(SMALL, "e" * 64, lease)
    assert not refused.claimed and refused.holder_live and refused.holder.identity == "d" * 64
    with pytest.raises(EvidenceError) as error:
        ledger.publish(forked, lease, "test", **(details | {"supersedes": {"identity": second.identity}}))
    assert error.value.code == "LEASE_FENCED"
    assert ledger.current_publication(SMALL).identity == second.identity
    assert _code(lambda: ledger.claim_publication(SMALL, "e" * 64, Lease(job.job_id, 99, "x", 0))) == ("LEASE_FENCED")


def _job_key(details: dict):
    from evidence_pipeline.ledger.jobs import JobKey

    return JobKey(
        details["tenant"],
        details["period"],
        details["source_sha256"],
        details["renderer_version"],
        details["policy_version"],
    )


def _code(call) -> str:
    with pytest.raises(EvidenceError) as error:
        call()
    return error.value.code


def test_ledger_verify_finds_a_forked_chain(runtime):
    first = run_tenant_month(runtime, SMALL, RUN)
    _correct_the_source(runtime)
    run_tenant_month(runtime, SMALL, RunInfo("corrected"))
    assert runtime.ledger.verify_chain() > 0
    # an event appended behind the commit's back, naming `first` again as the bundle it supersedes
    runtime.ledger.record(
        SMALL,
        EventType.BUNDLE_PUBLISHED,
        "0" * 64,
        "intruder",
        identity="c" * 64,
        supersedes={"identity": first.identity, "prefix": first.bundle_key, "reason": ["x"]},
    )
    with pytest.raises(EvidenceError) as error:
        runtime.ledger.verify_chain()
    assert error.value.code == "LEDGER_INVALID" and "corrections chain forks" in error.value.message
