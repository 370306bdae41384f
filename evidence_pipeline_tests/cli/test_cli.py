"""`evidence` exit codes through the one error boundary: 0 ok, 1 a check failed, 2 usage or not found, 3 unavailable."""

import json

import click
import pytest
from click.testing import CliRunner

from evidence_pipeline.audit.checkpoints import publish_checkpoint
from evidence_pipeline.errors import ReasonCode, exit_code
from evidence_pipeline.monthly.bundle import MANIFEST
from evidence_pipeline.monthly.pipeline import run_tenant_month
from evidence_pipeline.runtime import RunInfo
from evidence_pipeline_tests.support.cli import invoke
from evidence_pipeline_tests.support.fixture_sources import SMALL
from evidence_pipeline_tests.support.tampering import overwrite


def _error(result) -> str:
    return json.loads(result.output)["error"]["code"]


def test_every_reason_code_has_an_exit_code():
    assert {exit_code(code) for code in ReasonCode} == {1, 2, 3}


def test_verify_on_an_unreachable_store_is_3_not_tampering(tmp_path):
    env = {
        "EVIDENCE_HOME": str(tmp_path / "home"),
        "EVIDENCE_S3_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "AWS_REGION": "us-east-1",
        "AWS_MAX_ATTEMPTS": "1",
    }
    result = invoke(["verify", "s3://bucket/archive/bundles/acme-books/2026-10/" + "0" * 64, "--json"], env)
    assert result.exit_code == 3 and _error(result) == "STORE_UNAVAILABLE"


def test_verify_usage_and_not_found_is_2(tmp_path):
    """A folder with no bundle below it is not found; the message names what the user passed, nothing else."""
    result = invoke(["verify", str(tmp_path), "--json"], {"EVIDENCE_HOME": str(tmp_path / "home")})
    assert result.exit_code == 2 and json.loads(result.output) == {
        "error": {
            "code": "BUNDLE_NOT_FOUND",
            "message": f"no bundle below {tmp_path}: expected an archive or "
            "<archive>/bundles[/<tenant>[/<period>[/<identity>]]], as a folder or s3://bucket/prefix",
        }
    }
    assert invoke(["verify"], {}).exit_code == 2  # no location at all: click's usage error


@pytest.mark.parametrize(
    "content, code, status",
    [
        (None, "LEDGER_NOT_FOUND", 2),
        (b"", "LEDGER_INVALID", 1),
        (bytes(range(256)) * 64, "LEDGER_INVALID", 1),
    ],
)
def test_ledger_verify_classifies_and_writes_nothing(tmp_path, content, code, status):
    path = tmp_path / "ledger.sqlite"
    if content is not None:
        path.write_bytes(content)
    env = {"EVIDENCE_HOME": str(tmp_path / "home"), "EVIDENCE_LEDGER_URL": f"sqlite:///{path}"}
    result = invoke(["ledger", "verify"], env)
    assert result.exit_code == status and code in result.output
    assert not (tmp_path / "home").exists() and (content is None or path.read_bytes() == content)


@pytest.mark.parametrize(
    "command",
    [
        ["tenant", "list"],
        ["stats"],
        ["ledger", "verify"],
        ["dead-letter", "list"],
        ["keys", "list"],
        ["actor", "list"],
        ["export", "--tenant", "acme", "package"],
    ],
)
def test_a_read_command_where_there_is_no_home_creates_nothing_and_says_so(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)  # outside the repository: EVIDENCE_HOME unset means ./.evidence
    result = invoke(command, {"EVIDENCE_HOME": None})
    assert result.exit_code == 2 and "HOME_NOT_FOUND" in result.output and "EVIDENCE_HOME" in result.output
    assert list(tmp_path.iterdir()) == []


def test_ledger_commands_on_an_unreachable_database_are_3(tmp_path):
    env = {
        "EVIDENCE_HOME": str(tmp_path / "home"),
        "EVIDENCE_LEDGER_URL": "postgresql+psycopg2://nobody@127.0.0.1:9/ledger?connect_timeout=2",
    }
    assert invoke(["ledger", "verify"], env).exit_code == 3
    stats = invoke(["stats", "--json"], env)
    assert stats.exit_code == 3 and _error(stats) == "LEDGER_UNAVAILABLE"


def test_ledger_prove_exit_codes(runtime, backend):
    publication = run_tenant_month(runtime, SMALL, RunInfo("run-1"))
    bundle = runtime.archive.uri(publication.bundle_key)
    if bundle.startswith("archive://"):
        bundle = str(runtime.archive.root / publication.bundle_key)
    not_checkpointed = invoke(["ledger", "prove", bundle], backend)
    assert not_checkpointed.exit_code == 2 and "LEDGER_NOT_CHECKPOINTED" in not_checkpointed.output
    publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring)
    proved = invoke(["ledger", "prove", bundle], backend)
    assert proved.exit_code == 0 and json.loads(proved.output)["event_seq"] == publication.ledger_seq
    overwrite(runtime, f"{publication.bundle_key}/{MANIFEST}", b"[" * 200_000 + b"]" * 200_000)
    deep = invoke(["ledger", "prove", bundle], backend)
    assert deep.exit_code == 1 and "MANIFEST_INVALID" in deep.output


def test_the_instance_file_is_the_repositorys_until_someone_edits_it(tmp_path, capsys):
    """`evidence ui`, `demo` and `stats` seed DAGSTER_HOME's dagster.yaml: they replace the one they wrote when the
    repository's changes, and keep an edited one, saying what differs."""
    from evidence_pipeline.cli.resources import seed_instance_file

    template, target = tmp_path / "dagster.yaml", tmp_path / "home" / "dagster.yaml"
    target.parent.mkdir()
    template.write_text("run_retries:\n  max_retries: 2\n")
    seed_instance_file(template, target)
    assert target.read_text() == template.read_text() and capsys.readouterr().err == ""
    template.write_text("run_retries:\n  max_retries: 3\n")  # a new release
    seed_instance_file(template, target)
    assert target.read_text() == template.read_text() and capsys.readouterr().err == ""
    target.write_text("run_retries:\n  max_retries: 9\n")  # an operator's edit
    seed_instance_file(template, target)
    assert target.read_text() == "run_retries:\n  max_retries: 9\n"
    said = capsys.readouterr().err
    assert "Keeping the instance's dagster.yaml" in said and "-  max_retries: 3" in said and "+  max_retries: 9" in said
    (tmp_path / "other").mkdir()
    foreign = tmp_path / "other" / "dagster.yaml"  # an instance file this project never wrote
    foreign.write_text("telemetry:\n  enabled: true\n")
    seed_instance_file(template, foreign)
    assert foreign.read_text() == "telemetry:\n  enabled: true\n" and "Keeping" in capsys.readouterr().err


def test_a_command_that_prints_none_fails_the_test_that_ran_it():
    @click.command()
    def says_none():
        click.echo("next attempt: None")

    @click.command()
    def says_none_in_words():
        click.echo("None of the months is overdue; key 'None' is a name, not a value")

    with pytest.raises(AssertionError, match="printed Python's None"):
        CliRunner().invoke(says_none)
    assert CliRunner().invoke(says_none_in_words).exit_code == 0
