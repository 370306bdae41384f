"""Results out, on both backends: a job's committed outputs and a month's current bundle downloaded over HTTP, as
the contract describes them; the downloaded bundle file verifies as it is; nothing of another tenant or of a job
that has not committed; 304 on If-None-Match; on S3, 303 to a presigned URL when the setting asks for it."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile

import httpx
import pytest
from click.testing import CliRunner

from evidence_pipeline.cli import main
from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.intake.app import CONTRACT
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.monthly.pipeline import run_tenant_month
from evidence_pipeline.runtime import RunInfo, runtime_for
from evidence_pipeline.store import CHUNK, verified_chunks
from evidence_pipeline.store.local import LocalStore
from evidence_pipeline.synthetic.demo_data import demo_transactions
from evidence_pipeline.synthetic.rental_applications import application
from evidence_pipeline_tests.support.contract import conforms
from evidence_pipeline_tests.support.document_jobs import dispatch
from evidence_pipeline_tests.support.fixture_sources import publish_revision
from evidence_pipeline_tests.support.intake_server import client, error_code, intake_environment, running_server, upload
from evidence_pipeline_tests.support.redaction import approved, redact_job
from evidence_pipeline_tests.support.signers import signers_of
from evidence_pipeline_tests.support.tampering import overwrite

INTAKE_OVERRIDES = {"EVIDENCE_INTAKE_MAX_BYTES": str(1 << 20)}  # the rental applications are larger than 64 KB
MONTH = TenantMonth("acme", "2026-10")


def declares(method: str, template: str, response: httpx.Response) -> None:
    """A binary or empty answer is one the contract declares: its status, its required headers, its media type."""
    answer = CONTRACT["paths"][template][method]["responses"].get(str(response.status_code))
    assert answer is not None, f"{template} answered {response.status_code}"
    for header, spec in answer.get("headers", {}).items():
        assert not spec.get("required") or header in response.headers, header
    if "content" in answer:
        assert response.headers["content-type"].split(";")[0] in answer["content"]


def sha256_of(response: httpx.Response) -> str:
    return hashlib.sha256(response.content).hexdigest()


def test_a_redactions_outputs_download_with_the_digest_its_status_shows(documents, intake):
    acme = signers_of(documents.ledger).issue_token("acme")
    globex = signers_of(documents.ledger).issue_token("globex")
    approved(documents)
    with client(intake, acme) as http, client(intake, globex) as other:
        document_id = upload(http, application(scanned_page=False)).json()["document_id"]
        job_id = redact_job(http, "r-1", document_id).json()["job_id"]
        waiting = http.get(f"/v1/jobs/{job_id}/outputs")  # accepted, not yet committed: nothing to list or fetch
        assert waiting.json()["outputs"] == [] and waiting.json()["committed"] is False
        [outcome] = dispatch(documents)
        assert outcome.state == "succeeded"
        status = http.get(f"/v1/jobs/{job_id}").json()
        listed = http.get(f"/v1/jobs/{job_id}/outputs")
        outputs = {output["name"]: output for output in listed.json()["outputs"]}
        [derivative] = [name for name in outputs if name.startswith("redacted-")]
        url = outputs[derivative]["url"]
        download = http.get(url)
        etag = download.headers["etag"]
        again = http.get(url, headers={"If-None-Match": etag})
        weakly = http.get(url, headers={"If-None-Match": f'"{"0" * 64}", W/{etag}'})
        changed = http.get(url, headers={"If-None-Match": f'"{"0" * 64}"'})
        statement = http.get(outputs["statement.dsse.json"]["url"])
        head = http.head(url)
        answers = [
            ("get", "/v1/jobs/{job_id}/outputs", waiting),
            ("get", "/v1/jobs/{job_id}/outputs", listed),
            ("get", "/v1/jobs/{job_id}/outputs", other.get(f"/v1/jobs/{job_id}/outputs")),
            ("get", "/v1/jobs/{job_id}/outputs/{name}", other.get(url)),
            ("get", "/v1/jobs/{job_id}/outputs/{name}", http.get(f"/v1/jobs/{job_id}/outputs/nothing.pdf")),
        ]
        unrun = redact_job(http, "r-2", upload(http, application()).json()["document_id"]).json()["job_id"]
        uncommitted = http.get(f"/v1/jobs/{unrun}/outputs/{derivative}")
    for method, template, response in answers:
        conforms(method, template, response)
    for response in (download, again, weakly, changed, statement):
        declares("get", "/v1/jobs/{job_id}/outputs/{name}", response)
    assert [(r.status_code, error_code(r)) for _, _, r in answers[2:]] == [
        (404, "JOB_NOT_FOUND"),
        (404, "JOB_NOT_FOUND"),
        (404, "OUTPUT_NOT_FOUND"),
    ]
    assert (uncommitted.status_code, error_code(uncommitted)) == (404, "OUTPUT_NOT_FOUND")
    [recorded] = [o for o in status["outputs"] if o["artifact_id"] == outputs[derivative]["artifact_id"]]
    assert download.status_code == 200 and download.content.startswith(b"%PDF-")
    assert sha256_of(download) == recorded["sha256"] == outputs[derivative]["sha256"]
    assert etag == f'"{recorded["sha256"]}"' and int(download.headers["content-length"]) == recorded["bytes"]
    assert (
        download.headers["repr-digest"]
        == "sha-256=:" + base64.b64encode(hashlib.sha256(download.content).digest()).decode() + ":"
    )
    assert download.headers["content-type"] == "application/pdf"
    assert download.headers["content-disposition"] == f'attachment; filename="{derivative}"'
    assert (again.status_code, again.content, again.headers["etag"]) == (304, b"", etag)
    assert weakly.status_code == 304 and changed.status_code == 200 and sha256_of(changed) == recorded["sha256"]
    assert statement.headers["content-type"] == "application/json"
    assert sha256_of(statement) == outputs["statement.dsse.json"]["sha256"]
    assert head.status_code == 200 and head.content == b"" and head.headers["content-length"] == str(recorded["bytes"])

    # someone with write access to the archive changes one byte: an output of one chunk is refused before any byte
    overwrite(documents, recorded["artifact_id"], download.content[:-1] + bytes([download.content[-1] ^ 1]))
    with client(intake, acme) as http:
        tampered = http.get(url)
    conforms("get", "/v1/jobs/{job_id}/outputs/{name}", tampered)
    assert (tampered.status_code, error_code(tampered)) == (500, "STORE_DIGEST_MISMATCH")


def test_a_stream_stops_before_its_last_chunk_when_the_bytes_are_not_the_committed_ones(tmp_path):
    store = LocalStore(tmp_path / "archive")
    data = bytes(range(256)) * (3 * CHUNK // 256)
    stored = store.put_once("documents/acme/big.pdf", data)
    assert b"".join(verified_chunks(store, stored.key, stored.sha256, stored.size)) == data
    received = []
    with pytest.raises(EvidenceError) as refused:
        received.extend(verified_chunks(store, stored.key, "0" * 64, stored.size))
    assert refused.value.code == "STORE_DIGEST_MISMATCH" and b"".join(received) == data[: 2 * CHUNK]
    with pytest.raises(EvidenceError):
        received.extend(verified_chunks(store, stored.key, stored.sha256, stored.size - 1))  # a longer object


def test_presigned_downloads_on_s3_when_asked_and_the_local_store_always_proxies(documents, backend):
    presigning = runtime_for(
        Settings.from_env(intake_environment(backend) | INTAKE_OVERRIDES | {"EVIDENCE_DOWNLOAD_PRESIGN_SECONDS": "60"})
    )
    acme = signers_of(presigning.ledger).issue_token("acme")
    approved(presigning)
    with running_server(presigning) as url, client(url, acme) as http:
        job_id = redact_job(http, "r-1", upload(http, application(scanned_page=False)).json()["document_id"]).json()[
            "job_id"
        ]
        dispatch(presigning)
        [output] = [
            o for o in http.get(f"/v1/jobs/{job_id}/outputs").json()["outputs"] if o["name"].startswith("redacted-")
        ]
        answer = http.get(output["url"])
        unchanged = http.get(output["url"], headers={"If-None-Match": f'"{output["sha256"]}"'})
    declares("get", "/v1/jobs/{job_id}/outputs/{name}", answer)
    assert unchanged.status_code == 304
    if "EVIDENCE_ARCHIVE_URI" not in backend:  # the local store: the bytes come from the server
        assert answer.status_code == 200 and sha256_of(answer) == output["sha256"]
        return
    assert answer.status_code == 303 and answer.headers["cache-control"] == "no-store"
    location = answer.headers["location"]
    assert location.startswith(backend["EVIDENCE_S3_ENDPOINT_URL"]) and "Expires=" in location
    fetched = httpx.get(location)  # no Authorization: the URL alone grants the read, for 60 seconds
    assert fetched.status_code == 200 and sha256_of(fetched) == output["sha256"]


def _invoke(args: list[str], env: dict[str, str]):
    result = CliRunner().invoke(main, args, env=env)
    assert "Traceback" not in result.output
    return result


def test_the_months_bundle_downloads_as_one_file_that_verify_accepts_as_it_is(documents, intake, backend, tmp_path):
    rt = documents
    acme = signers_of(documents.ledger).issue_token(MONTH.tenant)
    globex = signers_of(documents.ledger).issue_token("globex")
    with client(intake, acme) as http, client(intake, globex) as other:
        none_yet = http.get(f"/v1/evidence/{MONTH.period}")
        publish_revision(rt, MONTH, demo_transactions(TenantMonth("acme-books", MONTH.period)))
        first = run_tenant_month(rt, MONTH, RunInfo("month-close"))
        before = http.get(f"/v1/evidence/{MONTH.period}")
        first_file = http.get(f"/v1/evidence/{MONTH.period}/bundle")
        # a new source revision: the month's next bundle supersedes the first
        publish_revision(rt, MONTH, demo_transactions(TenantMonth("evergreen-market", MONTH.period)))
        second = run_tenant_month(rt, MONTH, RunInfo("correction"))
        evidence = http.get(f"/v1/evidence/{MONTH.period}")
        bundle = http.get(f"/v1/evidence/{MONTH.period}/bundle")
        repeated = http.get(f"/v1/evidence/{MONTH.period}/bundle")
        unchanged = http.get(f"/v1/evidence/{MONTH.period}/bundle", headers={"If-None-Match": bundle.headers["etag"]})
        stale = http.get(f"/v1/evidence/{MONTH.period}/bundle", headers={"If-None-Match": first_file.headers["etag"]})
        answers = [
            ("get", "/v1/evidence/{period}", none_yet),
            ("get", "/v1/evidence/{period}", before),
            ("get", "/v1/evidence/{period}", evidence),
            ("get", "/v1/evidence/{period}", other.get(f"/v1/evidence/{MONTH.period}")),
            ("get", "/v1/evidence/{period}", http.get("/v1/evidence/2026-13")),
            ("get", "/v1/evidence/{period}/bundle", other.get(f"/v1/evidence/{MONTH.period}/bundle")),
        ]
    for method, template, response in answers:
        conforms(method, template, response)
    for response in (first_file, bundle, unchanged, stale):
        declares("get", "/v1/evidence/{period}/bundle", response)
    assert [(r.status_code, error_code(r)) for r in (none_yet, answers[3][2], answers[4][2], answers[5][2])] == [
        (404, "EVIDENCE_NOT_FOUND"),
        (404, "EVIDENCE_NOT_FOUND"),
        (422, "PERIOD_INVALID"),
        (404, "EVIDENCE_NOT_FOUND"),
    ]
    view = evidence.json()
    assert view["identity"] == second.identity != first.identity == before.json()["identity"]
    assert view["manifest"]["identity"] == second.identity and view["manifest"]["source"]["sequence"] == 2
    assert [(link["identity"], link["reason"]) for link in view["supersedes"]] == [
        (first.identity, ["source_revision"])
    ]
    assert before.json()["supersedes"] == []
    assert bundle.content == repeated.content and len(bundle.content) == int(bundle.headers["content-length"])
    assert view["bundle"]["bytes"] == len(bundle.content) and view["bundle"]["etag"] == bundle.headers["etag"]
    assert (unchanged.status_code, unchanged.content) == (304, b"") and stale.status_code == 200
    assert bundle.headers["etag"] != first_file.headers["etag"]
    with tarfile.open(fileobj=io.BytesIO(bundle.content)) as tar:
        names = tar.getnames()
        manifest = tar.extractfile(f"{second.bundle_key}/manifest.json").read()
    assert names == sorted(names) and f"{second.bundle_key}/report.pdf" in names
    assert all(name.startswith((f"{second.bundle_key}/", "keys/")) for name in names)
    assert manifest == rt.archive.get(f"{second.bundle_key}/manifest.json")  # the archive's, byte for byte

    downloaded = tmp_path / "evidence.tar"
    downloaded.write_bytes(bundle.content)
    verified = _invoke(["verify", str(downloaded), "--json"], intake_environment(backend))
    assert verified.exit_code == 0, verified.output
    assert '"ok": true' in verified.output and '"in_archive": false' in verified.output  # the file: one bundle
    older = tmp_path / "superseded.tar"
    older.write_bytes(first_file.content)
    assert _invoke(["verify", str(older)], intake_environment(backend)).exit_code == 0

    report = bundle.content.index(b"%PDF-")  # one byte of the report changed: the file no longer verifies
    tampered = tmp_path / "tampered.tar"
    tampered.write_bytes(
        bundle.content[: report + 100] + bytes([bundle.content[report + 100] ^ 1]) + bundle.content[report + 101 :]
    )
    refused = _invoke(["verify", str(tampered)], intake_environment(backend))
    assert refused.exit_code == 1 and "STORE_DIGEST_MISMATCH" in refused.output
    not_a_bundle = tmp_path / "notes.txt"
    not_a_bundle.write_text("hello")
    odd = _invoke(["verify", str(not_a_bundle)], intake_environment(backend))
    assert odd.exit_code == 1 and "BUNDLE_FILE_INVALID" in odd.output
