"""`evidence source publish`: an operator publishes a file (or a folder of them) with a signed request; the event
names the operator and carries the request, which the offline re-check accepts; a file that breaks the format,
or a signer without the operator role, publishes nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner

from evidence_pipeline.audit.authorizations import recheck_ledger
from evidence_pipeline.cli import main
from evidence_pipeline.config import Settings
from evidence_pipeline.models import EventType, TenantMonth
from evidence_pipeline.monthly import sources
from evidence_pipeline.monthly.landing import MARKER
from evidence_pipeline.runtime import runtime_for
from evidence_pipeline.synthetic.demo_data import DEMO_TENANTS, demo_transactions
from evidence_pipeline_tests.support.signers import Signers

MONTH = TenantMonth("acme-books", "2026-07")
OTHER = TenantMonth("cobalt-cycles", "2026-07")


def _file(tmp_path, tenant_month: TenantMonth, folder: str = "files") -> str:
    path = tmp_path / folder / tenant_month.tenant / f"{tenant_month.period}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    demo_transactions(tenant_month).to_csv(path, index=False)
    return str(path)


def _setup(backend, tmp_path):
    runtime = runtime_for(Settings.from_env(backend))
    return runtime, Signers(runtime.ledger, tmp_path / "actors")


def _run(backend, *args):
    return CliRunner().invoke(main, ["source", "publish", *args], env=backend)


def test_an_operator_publishes_a_file_signed_and_the_same_file_again_converges(backend, tmp_path):
    runtime, signers = _setup(backend, tmp_path)
    olga = ["--key", signers.key_file("olga")]
    first = _run(backend, MONTH.tenant, MONTH.period, _file(tmp_path, MONTH), *olga)
    assert first.exit_code == 0, first.output
    assert "acme-books 2026-07: revision 1 published" in first.output
    again = _run(backend, MONTH.tenant, MONTH.period, _file(tmp_path, MONTH), *olga, "--json")
    assert again.exit_code == 0, again.output
    [result] = json.loads(again.output)
    assert result["published"] is False and result["sequence"] == 1
    revision = sources.pin_latest(runtime.sources, MONTH)
    assert result["sha256"] == revision.sha256 and result["rows"] == len(demo_transactions(MONTH))
    [event] = runtime.ledger.events_of_type(EventType.SOURCE_PUBLISHED, MONTH.tenant)
    assert event["actor"] == "olga" and event["subject_sha256"] == revision.sha256
    assert event["details"]["authorization"]["signatures"]  # the signed request, stored with its event
    assert [
        (a.actor, a.action) for a in recheck_ledger(runtime.ledger, 300) if a.event_type == EventType.SOURCE_PUBLISHED
    ] == [("olga", "source.publish")]
    runtime.ledger.verify_chain()


def test_a_signer_without_the_operator_role_publishes_nothing(backend, tmp_path):
    runtime, signers = _setup(backend, tmp_path)
    refused = _run(backend, MONTH.tenant, MONTH.period, _file(tmp_path, MONTH), "--key", signers.key_file("bob"))
    assert refused.exit_code == 1 and "ACTION_FORBIDDEN" in refused.output
    assert runtime.sources.list(MONTH.tenant) == []
    assert runtime.ledger.events_of_type(EventType.SOURCE_PUBLISHED) == []


def test_a_file_that_breaks_the_format_prints_its_report_and_publishes_nothing(backend, tmp_path):
    runtime, signers = _setup(backend, tmp_path)
    path = tmp_path / "bad.csv"
    frame = demo_transactions(MONTH)
    frame.loc[[4, 9], "kind"] = "chargeback"
    frame.to_csv(path, index=False)
    refused = _run(backend, MONTH.tenant, MONTH.period, str(path), "--key", signers.key_file("olga"))
    assert refused.exit_code == 1
    assert "SOURCE_INVALID" in refused.output and "(2 problems)" in refused.output
    assert "line 6, kind: SOURCE_VALUE_INVALID" in refused.output and "line 11, kind" in refused.output
    assert "chargeback" not in refused.output
    assert runtime.sources.list(MONTH.tenant) == []


def test_from_dir_publishes_each_file_and_reports_each_refusal(backend, tmp_path):
    runtime, signers = _setup(backend, tmp_path)
    _file(tmp_path, MONTH, "landing")
    _file(tmp_path, OTHER, "landing")
    broken = tmp_path / "landing" / "acme-books" / "2026-08.csv"
    broken.write_text("txn_id,booked_on\n")
    done = _run(backend, "--from-dir", str(tmp_path / "landing"), "--key", signers.key_file("olga"), "--json")
    assert done.exit_code == 1, done.output
    results = {(r["tenant"], r["period"]): r for r in json.loads(done.output)}
    assert results[("acme-books", "2026-08")]["error"]["problems"][0]["code"] == "SOURCE_COLUMN_MISSING"
    for tenant_month in (MONTH, OTHER):
        result = results[(tenant_month.tenant, tenant_month.period)]
        assert result["published"] and result["sha256"] == sources.pin_latest(runtime.sources, tenant_month).sha256
    assert len({r["correlation_id"] for r in results.values() if "correlation_id" in r}) == 1  # one command
    stray = tmp_path / "landing" / "notes.txt"
    stray.write_text("x")
    refused = _run(backend, "--from-dir", str(tmp_path / "landing"), "--key", signers.key_file("olga"))
    assert refused.exit_code == 2 and "not <tenant>/<YYYY-MM>.csv or <tenant>/<YYYY-MM>/<name>.csv" in refused.output


def test_from_dir_takes_the_landing_layout_as_the_sensor_does(backend, tmp_path):
    """A landing location's <tenant>/<YYYY-MM>/<name>.csv: each file a revision, in name order; markers and names
    beginning with "." passed over (before: the whole folder refused, exit 2)."""
    runtime, signers = _setup(backend, tmp_path)
    month = tmp_path / "landing" / MONTH.tenant / MONTH.period
    month.mkdir(parents=True)
    rows = demo_transactions(MONTH)
    rows.to_csv(month / "a-first.csv", index=False)
    rows.head(3).to_csv(month / "b-correction.csv", index=False)
    (month / ("a-first.csv" + MARKER)).write_text("{}")  # the sensor's marker beside a file it took
    (month / ".c-being-written.csv").write_text("txn_id\n")
    done = _run(backend, "--from-dir", str(tmp_path / "landing"), "--key", signers.key_file("olga"), "--json")
    assert done.exit_code == 0, done.output
    assert [(r["tenant"], r["period"], r["sequence"], r["rows"]) for r in json.loads(done.output)] == [
        (MONTH.tenant, MONTH.period, 1, len(rows)),
        (MONTH.tenant, MONTH.period, 2, 3),
    ]
    assert sources.pin_latest(runtime.sources, MONTH).sequence == 2


def test_from_dir_reads_no_link_and_no_hard_link_as_the_sensor_does(backend, tmp_path):
    """Pointed at a landing location, --from-dir read what a tenant's links pointed to (another tenant's file, or
    any file the operator can read) and published it under the folder's tenant, as the sensor did before issue 47;
    now each such entry is refused with the sensor's code and never read, and the others are published."""
    runtime, signers = _setup(backend, tmp_path)
    theirs = Path(_file(tmp_path, OTHER, "landing"))  # cobalt-cycles/2026-07.csv, a real file: published
    month = tmp_path / "landing" / MONTH.tenant / MONTH.period
    month.mkdir(parents=True)
    (month / "linked.csv").symlink_to(theirs)
    (tmp_path / "landing" / MONTH.tenant / "2026-08.csv").symlink_to(theirs)
    outside = tmp_path / "outside.csv"
    demo_transactions(MONTH).to_csv(outside, index=False)
    (month / "hard.csv").hardlink_to(outside)
    os.mkfifo(month / "pipe.csv")  # read, it would wait for a writer forever
    done = _run(backend, "--from-dir", str(tmp_path / "landing"), "--key", signers.key_file("olga"), "--json")
    assert done.exit_code == 1, done.output
    codes = sorted(result["error"]["code"] for result in json.loads(done.output) if "error" in result)
    assert codes == ["LANDING_HARD_LINK", "LANDING_NOT_REGULAR", "LANDING_SYMLINK", "LANDING_SYMLINK"]
    assert runtime.sources.list(MONTH.tenant) == [] and sources.pin_latest(runtime.sources, OTHER).sequence == 1


def test_the_documented_sample_folder_publishes_as_the_docs_say(backend, tmp_path):
    runtime, signers = _setup(backend, tmp_path)
    samples = Path(__file__).resolve().parents[2] / "docs" / "samples"
    done = _run(backend, "--from-dir", str(samples), "--key", signers.key_file("olga"))
    assert done.exit_code == 0, done.output
    sample = TenantMonth("sample-shop", "2026-07")
    assert sample.tenant not in DEMO_TENANTS  # the example adds a month beside the demo's, never a revision of one
    revision = sources.pin_latest(runtime.sources, sample)
    assert f"sample-shop 2026-07: revision 1 published: sha256 {revision.sha256}, 8 rows, {revision.size} bytes" in (
        done.output
    )
    documented = (samples.parent / "operators" / "sources.md").read_text()
    assert f"sha256 {revision.sha256[:8]}…, 8 rows, {revision.size} bytes" in documented
    assert len(sources.read_revision(runtime.sources, revision)) == 8
