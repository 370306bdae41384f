"""Packages exported with witnessed checkpoints, and the reference Go verifier of their proofs."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline.audit.checkpoints import publish_checkpoint
from evidence_pipeline.audit.package import open_package
from evidence_pipeline.audit.package_index import sign_index
from evidence_pipeline.audit.witnessing import cosignature_key, publish_note
from evidence_pipeline.cli import main
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.signed_note import COSIGNATURE_V1, cosign, verifier
from evidence_pipeline_tests.support.tools import require_tool


def export(home: Path, out: Path, cosigners: int, witnesses: str = "") -> None:
    result = CliRunner().invoke(
        main,
        ["export", "--tenant", "acme-books", str(out)],
        env={"EVIDENCE_HOME": str(home), "EVIDENCE_WITNESSES": witnesses},
    )
    assert result.exit_code == 0, result.output
    assert f"the newest co-signed by {cosigners} outside witness(es)" in result.output


def verify(package: Path, *witness_args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(main, ["verify", "--package", str(package), "--json", "--workers", "1", *witness_args])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, json.loads(result.output)


def cosigned_checkpoint(runtime: Runtime, witness: ed25519.Ed25519PrivateKey) -> dict:
    """Publish the head, its note and the witness's cosignature (in-process: the formats, not the protocol)."""
    checkpoint = publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring)
    note = publish_note(runtime.archive, runtime.settings.log_origin, runtime.keyring.statement_key, checkpoint)
    runtime.archive.put_once(
        cosignature_key(checkpoint["size"], verifier(WITNESS, COSIGNATURE_V1, witness)),
        cosign(note.text, WITNESS, witness, 1_800_000_000).encode(),
    )
    return checkpoint


def resign(package: Path, runtime: Runtime) -> None:
    """Re-sign package.json over the package's files as they now are, with the statement key (the operator's own)."""
    index = package / "package.json"
    files = {
        path.relative_to(package).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in package.rglob("*")
        if path.is_file() and path != index
    }
    index.chmod(0o644)
    index.write_bytes(
        sign_index(
            open_package(str(package))[1].signed.document,
            files,
            runtime.keyring.statement_key,
            runtime.keyring.statement_key_id,
        )
    )


WITNESS = "witness.test/pinned"


def go_tlog_proof_check(tmp_path: Path) -> Path:
    """tlog_proof_check.go built with Debian's golang-go and golang-golang-x-mod-dev (code we did not write)."""
    go = require_tool("go")
    if not Path("/usr/share/gocode/src/golang.org/x/mod/sumdb/tlog").is_dir():
        pytest.skip("golang-golang-x-mod-dev is not installed")
    built = tmp_path / "tlog-proof-check"
    subprocess.run(
        [go, "build", "-o", built, Path(__file__).with_name("tlog_proof_check.go")],
        check=True,
        env={
            "GOPATH": "/usr/share/gocode",
            "GO111MODULE": "off",
            "GOCACHE": str(tmp_path / "gocache"),
            "HOME": str(tmp_path),
            "PATH": "/usr/bin:/bin",
        },
    )
    return built
