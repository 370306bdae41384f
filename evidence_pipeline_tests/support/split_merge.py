"""Signed district agreements through the front door: the signing PKI, the intake environment that trusts it, and
the split and merge jobs on it."""

from __future__ import annotations

import json

import pytest

from evidence_pipeline.actors.roles import Action
from evidence_pipeline.config import Settings
from evidence_pipeline.documents.decisions import decide_part
from evidence_pipeline.runtime import runtime_for
from evidence_pipeline.signing.keys import load_keyring
from evidence_pipeline.synthetic import district_agreements as bundles
from evidence_pipeline_tests.support.cli import invoke
from evidence_pipeline_tests.support.document_jobs import dispatch
from evidence_pipeline_tests.support.intake_server import intake_environment, submit, upload
from evidence_pipeline_tests.support.signers import signers_of

PARTS = [{"name": part.name, "pages": part.pages} for part in bundles.PARTS]
DISTRICT = {"ruleset": bundles.RULESET}  # what reviews the agreement's parts
TRUSTED = "EVIDENCE_SIGNATURE_TRUST_ROOTS"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """The district's signing certificate (the policy trusts its root) and a stranger's (not trusted)."""
    home = tmp_path_factory.mktemp("pki")
    return load_keyring(home / "district", generate=True), load_keyring(home / "stranger", generate=True)


@pytest.fixture
def environment(backend, pki) -> dict[str, str]:
    return intake_environment(backend) | {TRUSTED: str(pki[0].root_cert_path)}


@pytest.fixture
def documents(environment):
    return runtime_for(Settings.from_env(environment))


def status(http, job_id: str) -> dict:
    return http.get(f"/v1/jobs/{job_id}").json()


def accept(http, key: str, body: dict) -> str:
    accepted = submit(http, key, body)
    assert accepted.status_code in (200, 202), accepted.text
    return accepted.json()["job_id"]


def split_agreement(http, documents, pdf: bytes, key: str = "split-1", parts=PARTS) -> tuple[dict, dict]:
    document = upload(http, pdf).json()
    job_id = accept(http, key, {"operation": "split", "inputs": [document["document_id"]], "options": {"parts": parts}})
    dispatch(documents, f"run-{key}")
    return document, status(http, job_id)


def pdfs(status: dict) -> dict[str, str]:
    """part name -> the artifact id of its PDF"""
    return {
        o["artifact_id"].rsplit("/", 1)[1].removesuffix(".pdf"): o["artifact_id"]
        for o in status["outputs"]
        if o["artifact_id"].endswith(".pdf") and ".derived-by." not in o["artifact_id"]
    }


def walk(environment, artifact_id: str) -> tuple[int, dict]:
    result = invoke(["lineage", artifact_id, "--json"], environment)
    return result.exit_code, json.loads(result.output)


ADDENDUM = "data-processing-addendum"


def reviewed(documents, http, pki) -> dict[str, str]:
    """The signed agreement uploaded, split in four and each part reviewed under the district ruleset: part name ->
    its artifact id (the addendum rejected, the others approved)."""
    _, split = split_agreement(http, documents, bundles.sign(bundles.district_agreement(), pki[0]))
    parts = pdfs(split)
    reviews = {
        name: accept(
            http, f"review-{name}", {"operation": "contract-review", "inputs": [artifact], "options": DISTRICT}
        )
        for name, artifact in parts.items()
    }
    dispatch(documents, "run-reviews")
    decided = {name: status(http, job_id)["findings"]["decision"] for name, job_id in reviews.items()}
    assert decided == {p.name: "approved" if p.approved else "rejected" for p in bundles.PARTS}
    return parts


def decide(documents, actor: str, tenant: str, artifact_id: str, decision: str, reason: str) -> dict:
    signers = signers_of(documents.ledger)
    signers.ensure("rita", ["reviewer"])
    envelope = signers.sign(
        actor, Action.PART_DECIDE, {"artifact_id": artifact_id, "decision": decision, "reason": reason}, tenant=tenant
    )
    return decide_part(signers.gate, documents, envelope)
