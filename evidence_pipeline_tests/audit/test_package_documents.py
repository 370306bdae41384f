"""Every document artifact offline (issue 33): `evidence export` packs a tenant's document jobs (a redaction, the
four-part agreement split, its parts reviewed, a reviewer's decision, the merge) with what their lineage walks
through, and `evidence verify --package` walks each derivative back to its upload's digest with the database
gone. The uploads' bytes are in the package only --with-uploads. Removing, adding or swapping any file fails with
the code that names it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from evidence_pipeline.audit.checkpoints import publish_checkpoint
from evidence_pipeline.cli import main
from evidence_pipeline.config import Settings
from evidence_pipeline.models import EventType
from evidence_pipeline.runtime import runtime_for
from evidence_pipeline.synthetic import district_agreements as bundles
from evidence_pipeline.synthetic.rental_applications import application
from evidence_pipeline_tests.support import split_merge
from evidence_pipeline_tests.support.document_jobs import dispatch
from evidence_pipeline_tests.support.intake_server import client, intake_environment, tokens, upload
from evidence_pipeline_tests.support.packages import LOADED, read_index, swapped, unreachable, writable
from evidence_pipeline_tests.support.redaction import approved, redact_job
from evidence_pipeline_tests.support.split_merge import ADDENDUM, TRUSTED, accept, decide, pdfs, reviewed, status

pki = split_merge.pki  # the district's signing certificate, trusted by the documents' policy
TENANT = "acme"


@pytest.fixture
def environment(backend, pki) -> dict[str, str]:
    """The split and merge tests' settings, with room for a rental application."""
    return intake_environment(backend) | {
        TRUSTED: str(pki[0].root_cert_path),
        "EVIDENCE_INTAKE_MAX_BYTES": str(1 << 20),
    }


@pytest.fixture
def documents(environment):
    return runtime_for(Settings.from_env(environment))


@pytest.fixture
def jobs(documents, intake, pki) -> dict:
    """A demo-like month of one tenant's document jobs, then a checkpoint: the uploads, the redaction's output
    and the merge."""
    acme, _ = tokens(documents)
    approved(documents)
    with client(intake, acme) as http:
        applied = upload(http, application(scanned_page=False)).json()
        redaction = redact_job(http, "redact-1", applied["document_id"]).json()["job_id"]
        parts = reviewed(documents, http, pki)  # split in four, each part reviewed (the addendum rejected)
        decide(documents, "rita", TENANT, parts[ADDENDUM], "approved", "the addendum is acceptable after all")
        merge = accept(http, "merge-1", {"operation": "merge", "inputs": [parts[p.name] for p in bundles.PARTS]})
        dispatch(documents, "run-merge")
        statuses = {name: status(http, job_id) for name, job_id in (("redaction", redaction), ("merge", merge))}
    assert all(found["state"] == "succeeded" for found in statuses.values()), statuses
    rt = documents
    publish_checkpoint(rt.ledger, rt.archive, rt.keyring)
    uploads = {e["subject_sha256"] for e in rt.ledger.events_of_type(EventType.DOCUMENT_ADMITTED, TENANT)}
    return {
        "uploads": uploads,
        "redacted": pdfs(statuses["redaction"]),
        "merged": pdfs(statuses["merge"]),
        "parts": parts,
    }


def _export(environment: dict, out: Path, *args: str) -> None:
    result = CliRunner().invoke(main, ["export", "--tenant", TENANT, *args, str(out)], env=environment)
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output


def _verify(package: Path) -> tuple[int, dict]:
    result = CliRunner().invoke(main, ["verify", "--package", str(package), "--json", "--workers", "1"])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, json.loads(result.output)


def _digests(package: Path) -> set[str]:
    return {hashlib.sha256(path.read_bytes()).hexdigest() for path in package.rglob("*") if path.is_file()}


def _copy(package: Path, to: Path) -> Path:
    shutil.copytree(package, to)
    for path in to.rglob("*"):
        writable(path) if path.is_file() else path.chmod(0o755)
    return to


def test_every_document_artifact_verifies_offline_with_the_database_gone(
    documents, backend, environment, jobs, tmp_path
):
    private, with_uploads = tmp_path / "package", tmp_path / "with-uploads"
    _export(environment, private)
    _export(environment, with_uploads, "--with-uploads")
    index = read_index(private)["documents"]
    [merged] = jobs["merged"].values()
    assert merged in index["artifacts"] and set(jobs["redacted"].values()) <= set(index["artifacts"])
    assert set(jobs["parts"].values()) <= set(index["artifacts"])  # each split part, and each review's outputs
    assert not (private / "uploads").exists() and not jobs["uploads"] & _digests(private)  # digests only
    assert index["with_uploads"] is False and read_index(with_uploads)["documents"]["with_uploads"] is True
    [decided] = documents.ledger.stored_events(EventType.PART_DECIDED, TENANT)
    authorizations = [entry["event"] for entry in read_index(private)["authorizations"]]
    assert decided[0].seq in index["events"] and f"events/{decided[0].seq:012d}.json" in authorizations
    held = {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in (with_uploads / "uploads" / TENANT).iterdir()
    }
    assert set(held) == jobs["uploads"] and all(name == digest for name, digest in held.items())

    rt = documents
    unreachable(rt, backend, tmp_path)  # the database (and the local home) deleted
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("EVIDENCE_", "AWS_", "DAGSTER_"))}
    for package in (private, with_uploads):
        run = subprocess.run(
            [sys.executable, "-c", LOADED, "verify", "--package", str(package), "--workers", "1"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=clean | {"EVIDENCE_HOME": str(tmp_path / "nothing-here")},
        )
        *lines, last = run.stdout.splitlines()
        loaded = json.loads(last)
        assert loaded["exit"] == 0 and "VERIFIED" in lines, run.stdout + run.stderr
        assert not {"sqlalchemy", "psycopg2", "boto3", "dagster"} & set(loaded["modules"])
        assert f"ok   lineage {merged}" in lines
        code, report = _verify(package)
        assert code == 0 and report["codes"] == [], report["codes"]
        walked = {r["artifact_id"]: r for r in report["documents"]}
        assert set(walked) == set(index["artifacts"]) and all(r["ok"] for r in walked.values())
        kinds = [link["link"] for link in walked[merged]["links"]]
        assert {"derivative", "review", "decision", "signature_check", "upload"} <= set(kinds)
        uploads = [link for r in walked.values() for link in r["links"] if link["link"] == "upload"]
        assert {link["sha256"] for link in uploads} == jobs["uploads"]  # back to each upload's digest
        assert all(link["bytes_checked"] is (package == with_uploads) for link in uploads)
        assert all(c["passed"] for c in report["checks"] if c["name"].startswith("document event"))


def _removed(package: Path, pattern: str) -> None:
    [path] = sorted(package.glob(pattern))[:1]
    path.unlink()


def _added(package: Path) -> None:
    (package / "documents" / TENANT / "note.txt").write_text("added after the export")


def _parts_swapped(package: Path) -> None:
    swapped(*sorted(package.glob("documents/*/derived/*/*.pdf"))[:2])


# (what is done, what must be among the codes: the file check's, and what the walk finds)
TAMPERING = {
    "statement removed": (
        lambda p: _removed(p, "documents/*/derived/*/*.statement.dsse.json"),
        {"PACKAGE_FILE_MISSING", "LINEAGE_STATEMENT_INVALID"},
    ),
    "upload removed": (lambda p: _removed(p, "uploads/*/*"), {"PACKAGE_FILE_MISSING", "LINEAGE_DIGEST_MISMATCH"}),
    "file added": (_added, {"PACKAGE_FILE_UNLISTED"}),
    "hidden file added": (lambda p: (p / ".extra").write_bytes(b"x"), {"PACKAGE_FILE_UNLISTED"}),
    "parts swapped": (_parts_swapped, {"PACKAGE_FILE_MISMATCH", "LINEAGE_DIGEST_MISMATCH"}),
    "document event removed": (
        lambda p: _removed(p, "proofs/documents/*.json"),
        {"PACKAGE_FILE_MISSING", "PACKAGE_INCOMPLETE", "LINEAGE_EVENT_INVALID"},
    ),
}


def test_removing_adding_or_swapping_a_document_file_fails_with_its_code(environment, jobs, tmp_path):
    exported = tmp_path / "exported"
    _export(environment, exported, "--with-uploads")
    assert _verify(exported)[0] == 0
    for name, (tamper, codes) in TAMPERING.items():
        package = _copy(exported, tmp_path / name.replace(" ", "-"))
        tamper(package)
        code, report = _verify(package)
        assert code == 1 and codes <= set(report["codes"]), (name, report["codes"])
        assert set(report["codes"]) <= codes | {"PROOF_INVALID", "PACKAGE_INVALID"}, (name, report["codes"])
