"""Redaction end to end through the intake server on both backends: approved template versions, true removal
checked by three independent readers, the second pass catching an overlay-only redactor, refusals."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pikepdf
import pytest
from click.testing import CliRunner
from pikepdf import Name
from PIL import Image
from pypdf import PdfReader

from evidence_pipeline.audit.lineage_ledger import lineage
from evidence_pipeline.cli import main
from evidence_pipeline.config import Settings
from evidence_pipeline.documents import matching, ocr, pdftext, redact, templates
from evidence_pipeline.documents.dispatch import dispatch_batches
from evidence_pipeline.documents.redaction_check import _pypdf_text, verify_derivative
from evidence_pipeline.documents.registry import ACTIVE_CONTENT_OPTION, Operation, register
from evidence_pipeline.documents.template_shadow import shadow
from evidence_pipeline.documents.worker import job_prefix
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.monthly.pipeline import run_tenant_month
from evidence_pipeline.monthly.validate import pdfium_text
from evidence_pipeline.runtime import RunInfo
from evidence_pipeline.signing import dsse
from evidence_pipeline.store import sha256_hex
from evidence_pipeline.synthetic.demo_data import demo_transactions
from evidence_pipeline.synthetic.rental_applications import (
    NOTE,
    PLANTED,
    application,
    organization_template,
    program_template,
)
from evidence_pipeline_tests.support import hostile_pdfs, intake_server, redaction_corpus
from evidence_pipeline_tests.support.document_jobs import dispatch, make_due
from evidence_pipeline_tests.support.fixture_sources import publish_revision
from evidence_pipeline_tests.support.intake_server import client, error_code, intake_environment, submit, tokens, upload
from evidence_pipeline_tests.support.redaction import FLAG, approved, pdftotext, redact_job
from evidence_pipeline_tests.support.redaction import actors as _signers
from evidence_pipeline_tests.support.redaction import redact_pure as _redact_pure
from evidence_pipeline_tests.support.signers import Signers
from evidence_pipeline_tests.support.tampering import overwrite

INTAKE_OVERRIDES = {"EVIDENCE_INTAKE_MAX_BYTES": str(1 << 20)}
REPO = Path(__file__).resolve().parents[2]

# The overlay-only redactor: finds what the real one finds and draws the same marks, but removes nothing. Kept as a
# test double: the second pass must catch it.
OVERLAY_ONLY = register(
    Operation(
        name="redact-overlay-only",
        processor=lambda inputs, options, pinned: redact.run(inputs, pinned, remove=False),
        options=ACTIVE_CONTENT_OPTION,
        pin_policy=templates.pin,
        input_refused=ReasonCode.REDACTION_INPUT_MISSING,
        verify=verify_derivative,
    )
)


def raw_objects(data: bytes) -> bytes:
    """Every object of the file, streams decoded (qpdf's own reader, a third implementation), where qpdf is
    installed (`make test` installs it)."""
    if not shutil.which("qpdf"):
        return b""
    return subprocess.run(
        ["qpdf", "--qdf", "--object-streams=disable", "--decode-level=all", "-", "-"], input=data, capture_output=True
    ).stdout


def found_in(data: bytes, value: str) -> dict[str, bool]:
    flat = "".join(value.split()).casefold()

    def has(text: str) -> bool:
        return flat in "".join(text.split()).casefold()

    found = {
        "pypdf": any(has(page) for page in _pypdf_text(data)),
        "pdfium": any(has(page) for page in pdfium_text(data)),
        "raw": value.encode() in data or value.encode() in raw_objects(data),
    }
    if shutil.which("pdftotext"):
        found["pdftotext"] = has(pdftotext(data))
    return found


def test_every_planted_value_is_removed_and_the_original_is_untouched(documents, intake):
    acme, _ = tokens(documents)
    version = approved(documents)
    data = application()
    with client(intake, acme) as http:
        document = upload(http, data).json()
        job_id = redact_job(http, "redact-1", document["document_id"]).json()["job_id"]
        [outcome] = dispatch(documents)
        assert (outcome.state, outcome.reason) == ("succeeded", None)
        status = http.get(f"/v1/jobs/{job_id}").json()
    job = documents.document_jobs.job("acme", job_id)
    assert job.request["template_version"] == version
    key = redact.output_key(document["document_id"], document["sha256"], version)
    prefix = job_prefix(job)
    archive = documents.archive
    assert archive.list(prefix) == sorted(
        [f"{prefix}/redacted-{key}.pdf", f"{prefix}/redaction.json", f"{prefix}/statement.dsse.json"]
    )
    derivative = archive.get(f"{prefix}/redacted-{key}.pdf")
    for label, value in PLANTED.items():
        assert not any(found_in(derivative, value).values()), label
    assert any(found_in(data, PLANTED["old_income"]).values())  # in the earlier revision only
    for label in ("name", "national_id", "bank_account", "phone"):
        assert found_in(data, PLANTED[label])["raw"] or found_in(data, PLANTED[label])["pypdf"], label
    reader = PdfReader(io.BytesIO(derivative))
    assert derivative.count(b"%%EOF") == 1 and len(reader.pages) == 3
    assert not reader.attachments and reader.get_fields()["applicant_name"].get("/V") is None
    # the scan: the region's pixels are black in the image itself, the rest of the image is as it was
    [scan] = [x for x in reader.pages[2]["/Resources"]["/XObject"].values() if x["/Subtype"] == "/Image"]
    pixels = Image.frombytes("L", (scan["/Width"], scan["/Height"]), scan.get_data())
    assert pixels.crop((0, 0, 540, 76)).getextrema() == (0, 0) and pixels.getpixel((270, 400)) == 255
    [original_scan] = [x for x in PdfReader(io.BytesIO(data)).pages[2]["/Resources"]["/XObject"].values()]
    darkest, lightest = original_scan.decode_as_image().convert("L").crop((0, 0, 540, 76)).getextrema()
    assert darkest < 64 and lightest == 255  # the text was there
    assert "Springfield" in pdftotext(derivative)  # what no rule matches stays
    annots = [(a["/Subtype"], a.get("/Contents")) for a in reader.pages[0]["/Annots"]]
    assert sorted(annots, key=str) == sorted(
        [("/Widget", None), ("/Widget", None), ("/Text", NOTE), ("/Popup", None)], key=str
    )  # the removed note's popup went with it
    # the original: stored apart, byte for byte what was uploaded
    original = documents.document_store.get(f"acme/{document['sha256']}", expected_sha256=document["sha256"])
    assert original == data
    summary = status["findings"]
    assert summary["outcome"] == "redacted" and summary["template_version"] == version
    assert summary["removed"]["national_id"] == 2 and summary["removed"]["attachment"] == 1
    assert summary["removed"]["scanned_page"] == 1 and summary["marks"] >= 10
    assert summary["verification"]["passed"] and summary["verification"]["values_checked"] == 8
    keyring = documents.keyring
    opened = dsse.verify_envelope(
        archive.get(f"{prefix}/statement.dsse.json"),
        {keyring.statement_key_id: keyring.statement_key.public_key()},
        dsse.PAYLOAD_TYPE,
    )
    predicate = json.loads(opened.payload)["predicate"]
    assert predicate["inputs"] == [{"document_id": document["document_id"], "sha256": document["sha256"]}]
    assert predicate["summary"] == summary
    [published] = documents.ledger.events_of_type("document.published", tenant="acme")
    assert published["details"]["summary"]["verification"]["passed"]
    for value in PLANTED.values():  # nothing removed leaks into the ledger, the statement or the status
        assert value not in json.dumps(published) and value not in opened.payload.decode()


def test_the_same_application_and_template_converge_and_a_new_version_leaves_old_derivatives(documents, intake):
    acme, _ = tokens(documents)
    first = approved(documents)
    data = application(scanned_page=False)
    with client(intake, acme) as http:
        document = upload(http, data).json()
        one = redact_job(http, "a", document["document_id"]).json()["job_id"]
        two = redact_job(http, "b", document["document_id"]).json()["job_id"]
        dispatch(documents)
        second = approved(
            documents, program=program_template("family-units", scanned_page=None).replace(b"income", b"earnings", 1)
        )
        three = redact_job(http, "c", document["document_id"]).json()["job_id"]
        assert dispatch(documents, "run-2")[0].state == "succeeded"
    archive = documents.archive

    def derivative(job_id: str) -> tuple[str, bytes]:
        job = documents.document_jobs.job("acme", job_id)
        [name] = [k for k in archive.list(job_prefix(job)) if k.endswith(".pdf")]
        return name.rsplit("/", 1)[1], archive.get(name)

    assert second != first
    assert derivative(one) == derivative(two)  # same name (the output key) and the same bytes
    assert derivative(three)[0] != derivative(one)[0]
    assert documents.document_jobs.job("acme", three).request["template_version"] == second
    assert documents.document_jobs.job("acme", one).request["template_version"] == first


def test_the_overlay_only_redactor_is_caught_and_nothing_is_published(documents, intake):
    acme, _ = tokens(documents)
    approved(documents)
    with client(intake, acme) as http:
        document = upload(http, application()).json()
        job_id = redact_job(http, "weak", document["document_id"], OVERLAY_ONLY.name).json()["job_id"]
        [outcome] = dispatch(documents)
        status = http.get(f"/v1/jobs/{job_id}").json()
    assert (outcome.state, outcome.reason) == ("rejected", ReasonCode.REDACTION_VERIFICATION_FAILED)
    assert status["reason"] == ReasonCode.REDACTION_VERIFICATION_FAILED
    assert documents.archive.list(job_prefix(documents.document_jobs.job("acme", job_id))) == []
    assert documents.ledger.events_of_type("document.published", tenant="acme") == []


def test_a_scanned_page_without_a_region_is_refused(documents, intake):
    acme, _ = tokens(documents)
    approved(documents, program=program_template(scanned_page=None))
    with client(intake, acme) as http:
        document = upload(http, application()).json()
        redact_job(http, "scan", document["document_id"])
        [outcome] = dispatch(documents)
    assert (outcome.state, outcome.reason) == ("rejected", ReasonCode.REDACTION_UNSUPPORTED_CONTENT)


def test_a_template_that_matches_nothing_is_an_explicit_outcome(documents, intake):
    acme, _ = tokens(documents)
    nothing = json.dumps(
        {
            "kind": "program",
            "name": "other",
            "rules": [{"id": "passport", "label": "passport", "pattern": r"\bP<[A-Z]{3}\d{9}\b"}],
        }
    ).encode()
    approved(
        documents, organization=json.dumps({"kind": "organization", "name": "o", "rules": []}).encode(), program=nothing
    )
    with client(intake, acme) as http:
        document = upload(http, application(scanned_page=False)).json()
        job_id = redact_job(http, "none", document["document_id"]).json()["job_id"]
        [outcome] = dispatch(documents)
        status = http.get(f"/v1/jobs/{job_id}").json()
    assert outcome.state == "succeeded"  # the attachment is always removed: something was
    assert status["findings"]["outcome"] == "redacted" and status["findings"]["removed"] == {"attachment": 1}
    plain = _redact_pure(redaction_corpus.build(lambda pdf, page: None), nothing).summary
    assert plain["outcome"] == "no_matches" and plain["removed"] == {} and plain["marks"] == 0


def test_only_an_approved_effective_version_is_pinned(documents, intake):
    acme, _ = tokens(documents)
    ledger = documents.ledger
    with client(intake, acme) as http:
        document = upload(http, application()).json()
        refused = redact_job(http, "early", document["document_id"])
        assert (refused.status_code, error_code(refused)) == (422, ReasonCode.TEMPLATE_NOT_IN_EFFECT)
        signers = _signers(documents)
        version, created = signers.submit_template("acme", organization_template(), program_template(), "alice")
        assert created and signers.submit_template("acme", organization_template(), program_template(), "olga") == (
            version,
            False,
        )
        refused = redact_job(http, "unapproved", document["document_id"])
        assert error_code(refused) == ReasonCode.TEMPLATE_NOT_IN_EFFECT
        with pytest.raises(EvidenceError) as self_approval:
            signers.approve_template("acme", version["version_id"], "alice")
        assert self_approval.value.code == ReasonCode.TEMPLATE_SELF_APPROVAL
        later = datetime.now(timezone.utc) + timedelta(days=1)
        future = approved(documents, program=program_template("later-program"), effective_at=later)
        assert error_code(redact_job(http, "future", document["document_id"])) == ReasonCode.TEMPLATE_NOT_IN_EFFECT
        assert templates.in_effect(ledger, "acme", later.timestamp() + 1)["version_id"] == future
        signers.approve_template("acme", version["version_id"], "bob")
        accepted = redact_job(http, "now", document["document_id"])
    assert accepted.status_code == 202
    assert (
        documents.document_jobs.job("acme", accepted.json()["job_id"]).request["template_version"]
        == version["version_id"]
    )
    events = [e["event_type"] for e in ledger.events_of_type("template.approved", tenant="acme")]
    assert len(events) == 2


def test_a_template_that_breaks_the_format_is_refused():
    rules = (
        [{"id": "a", "label": "l", "pattern": "("}],
        [{"id": "a", "label": "l", "pattern": "x*"}],
        [{"id": "a", "label": "l", "field": "f", "pattern": "x"}],
        [{"id": "a", "label": "Bad", "field": "f"}],
        [{"id": "a", "label": "l", "region": {"page": 1, "rect": [5, 0, 1, 1]}}],
    )
    for bad in (b"{", *(json.dumps({"kind": "program", "name": "x", "rules": r}).encode() for r in rules)):
        with pytest.raises(EvidenceError) as refused:
            templates.parse(bad, "program")
        assert refused.value.code == ReasonCode.TEMPLATE_INVALID


@pytest.mark.parametrize("pattern", [r"(a+)\1", r"\d{3}(?=-)", r"(?<!x)\d+", r"(?x) a b"])
def test_a_rule_that_cannot_be_matched_in_linear_time_is_refused(pattern):
    """Backreferences and lookaround have no linear-time matcher: refused when submitted, never run."""
    template = json.dumps({"kind": "program", "name": "x", "rules": [{"id": "a", "label": "l", "pattern": pattern}]})
    with pytest.raises(EvidenceError) as refused:
        templates.parse(template.encode(), "program")
    assert refused.value.code == ReasonCode.TEMPLATE_INVALID and "RE2" in refused.value.message


@pytest.mark.parametrize(
    ("pattern", "named"),
    [
        ("보험Ⅲ", "U+2162"),
        ("ＳＳＮ", "U+FF33"),
        ("ﬁle", "U+FB01"),
        ("SS\u00adN", "U+00AD"),
        ("Rene\u0301", "a combining sequence"),
    ],
)
def test_a_rule_written_in_characters_text_is_normalized_away_from_is_refused(pattern, named):
    """Both passes match the normalized text (NFKC, invisible characters dropped), where such a character never is;
    the second pass reads text as written too. Before, such a rule was accepted: a Korean target ending in Ⅲ was
    never found by the first pass, and every job on a page that shows it failed the second
    (REDACTION_VERIFICATION_FAILED), as the corpus's demo-text-unnamed-fonts.pdf did."""
    template = json.dumps({"kind": "program", "name": "x", "rules": [{"id": "a", "label": "l", "pattern": pattern}]})
    with pytest.raises(EvidenceError) as refused:
        templates.parse(template.encode(), "program")
    assert refused.value.code == ReasonCode.TEMPLATE_INVALID and named in refused.value.message


def test_the_demo_e_mail_rule_on_hostile_text_finishes():
    r"""`[\w.+-]+@[\w-]+\.[\w.]+` is quadratic in a backtracking engine on a…a@a…a (300 KB ran for minutes);
    RE2 matches it in one linear scan."""
    rules = matching.Rules.of(json.loads(organization_template()))
    hostile = "a" * 150_000 + "@" + "a" * 150_000
    assert list(rules.matches(hostile)) == [] and list(rules.matches(hostile + ".net"))[0][3].endswith("a.net")


def test_template_commands_submit_approve_list_show_with_their_exit_codes(tmp_path):
    env = {"EVIDENCE_HOME": str(tmp_path / "home")}
    signers = Signers(Ledger(Settings.from_env(env).ledger_url), tmp_path / "actors")
    signers.register("alice", ["operator", "approver"])
    (tmp_path / "org.json").write_bytes(organization_template())
    (tmp_path / "program.json").write_bytes(program_template())
    (tmp_path / "bad.json").write_bytes(b'{"kind": "program"}')

    def run(*args: str):
        result = CliRunner().invoke(main, list(args), env=env)
        assert "Traceback" not in result.output
        return result

    files = ["--organization", str(tmp_path / "org.json"), "--program", str(tmp_path / "program.json")]
    submitted = run("template", "submit", "acme", *files, "--key", signers.key_file("alice"), "--json")
    assert submitted.exit_code == 0
    version = json.loads(submitted.output)["version_id"]
    listed = json.loads(run("template", "list", "acme", "--json").output)
    assert listed == {"in_effect": None, "versions": [json.loads(submitted.output)]}
    refused = run("template", "approve", "acme", version, "--key", signers.key_file("alice"), "--json")
    assert (refused.exit_code, json.loads(refused.output)["error"]["code"]) == (1, "TEMPLATE_SELF_APPROVAL")
    assert run("template", "approve", "acme", version, "--key", signers.key_file("bob")).exit_code == 0
    assert json.loads(run("template", "list", "acme", "--json").output)["in_effect"] == version
    shown = run("template", "show", "acme", version)
    assert shown.exit_code == 0 and "applicant-name" in shown.output and "approved by bob" in shown.output
    assert run("template", "show", "acme", "f" * 64).exit_code == 2  # TEMPLATE_NOT_FOUND
    assert run("template", "show", "other", version).exit_code == 2  # another tenant's versions are not seen
    bad = run(
        "template",
        "submit",
        "acme",
        "--organization",
        str(tmp_path / "org.json"),
        "--program",
        str(tmp_path / "bad.json"),
        "--key",
        signers.key_file("alice"),
        "--json",
    )
    assert (bad.exit_code, json.loads(bad.output)["error"]["code"]) == (1, "TEMPLATE_INVALID")


@pytest.mark.parametrize("point", ["after_document_verified", "after_document_put"])
def test_sigkill_between_the_derivative_and_the_commit_leaves_nothing_visible_and_the_retry_converges(
    documents, intake, backend, point
):
    acme, _ = tokens(documents)
    approved(documents)
    with client(intake, acme) as http:
        document = upload(http, application()).json()
        job_id = redact_job(http, "killed", document["document_id"]).json()["job_id"]
        env = (
            os.environ
            | intake_environment(backend)
            | INTAKE_OVERRIDES
            | {"EVIDENCE_LEASE_SECONDS": "1", "EVIDENCE_KILL_POINT": point}
        )
        documents.pages.assign_pages(documents.settings.document_page_size)
        [(page_id, _, _)] = documents.pages.open_pages()
        child = subprocess.run(
            [sys.executable, "-m", "evidence_pipeline_tests.support.fault_child", "documents", page_id],
            env=env,
            cwd=REPO,
            capture_output=True,
            timeout=300,
        )
        assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
        status = http.get(f"/v1/jobs/{job_id}").json()
        assert status["state"] == "running" and status["outputs"] == []  # nothing visible
        assert documents.ledger.events_of_type("document.published", tenant="acme") == []
        time.sleep(1.5)  # the dead worker's lease expires
        [lost] = dispatch(documents, "run-2")  # its attempt counts against the budget: retry_wait
        assert (lost.state, lost.reason) == ("accepted", "WORKER_LOST")
        make_due(documents, job_id)
        [outcome] = dispatch(documents, "run-3")
        status = http.get(f"/v1/jobs/{job_id}").json()
    assert (outcome.state, status["state"]) == ("succeeded", "succeeded")
    prefix = job_prefix(documents.document_jobs.job("acme", job_id))
    assert len(documents.archive.list(prefix)) == 3  # put-once objects of the dead attempt converged
    assert len(documents.ledger.events_of_type("document.published", tenant="acme")) == 1


def test_a_batch_pins_the_version_in_effect_when_the_batch_is_accepted(documents, intake):
    acme, _ = tokens(documents)
    first = approved(documents)
    with client(intake, acme) as http:
        document = upload(http, application(scanned_page=False)).json()
        spec = {"idempotency_key": "b-1", "operation": "redact", "inputs": [document["document_id"]], "options": FLAG}
        assert http.post("/v1/batches", json={"jobs": [spec]}).status_code == 202
        approved(documents, program=program_template("newer-program"))  # in effect before the children exist
        assert dispatch_batches(documents, 10, "test") == 1
        [outcome] = dispatch(documents)
    assert outcome.state == "succeeded"
    assert documents.document_jobs.job("acme", outcome.job_id).request["template_version"] == first


def test_the_monthly_report_counts_redactions_per_template_version_and_outcome(documents, intake):
    acme, _ = tokens(documents)
    rt = documents
    version = approved(documents)
    with client(intake, acme) as http:
        redacted = upload(http, application(scanned_page=False)).json()["document_id"]
        blank = upload(http, intake_server.pdf_bytes(1)).json()["document_id"]
        job_id = redact_job(http, "r-1", redacted).json()["job_id"]
        redact_job(http, "r-2", blank)
        dispatch(documents)
    month = TenantMonth("acme", documents.document_jobs.job("acme", job_id).period)
    publish_revision(rt, month, demo_transactions(TenantMonth("acme-books", month.period)))
    publication = run_tenant_month(rt, month, RunInfo("month-close"))
    report = PdfReader(io.BytesIO(rt.archive.get(f"{publication.bundle_key}/report.pdf")))
    text = " ".join(" ".join(page.extract_text() for page in report.pages).split())
    assert f"redact @ {version[:12]} succeeded: no_matches 1" in text
    assert f"redact @ {version[:12]} succeeded: redacted 1" in text


def test_shadow_compares_a_candidate_per_label_and_publishes_nothing(documents, intake, backend):
    acme, _ = tokens(documents)
    approved(documents)
    program = json.dumps(
        {
            "kind": "program",
            "name": "no-income",
            "rules": [
                {"id": "applicant-name", "label": "name", "field": "applicant_name"},
                {"id": "city", "label": "address", "field": "city"},
            ],
        }
    ).encode()
    candidate, _ = _signers(documents).submit_template("acme", organization_template(), program, "olga")
    with client(intake, acme) as http:
        document = upload(http, application(scanned_page=False)).json()
        redact_job(http, "s-1", document["document_id"])
    before = documents.archive.list("documents")
    result = shadow(documents, "acme", candidate["version_id"], 5)  # an unapproved candidate may be shadowed
    assert [d["document_id"] for d in result["documents"]] == [document["document_id"]]
    assert result["totals"]["only_current"] == {"income": 1} and result["totals"]["only_candidate"] == {"address": 1}
    assert result["totals"]["both"]["national_id"] == 2
    assert documents.archive.list("documents") == before == []  # nothing published
    assert PLANTED["income"] not in json.dumps(result) and "Springfield" not in json.dumps(result)
    shown = CliRunner().invoke(
        main,
        ["template", "shadow", "acme", candidate["version_id"]],
        env=intake_environment(backend) | INTAKE_OVERRIDES,
    )
    assert shown.exit_code == 0 and "income" in shown.output and "1 documents compared" in shown.output


def _one_page(content: bytes) -> bytes:
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R /F2 6 0 R /F3 7 0 R >> >> >>"
    )
    return hostile_pdfs.simple(
        hostile_pdfs.stream(content),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Font /Subtype /Type0 /BaseFont /X /Encoding /Identity-H /DescendantFonts [] >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Y /Encoding << /Differences [49 /g1 /g2] >> >>",
        page=page,
    )


def test_each_page_is_read_into_views_once_unless_a_page_before_it_changed_what_it_draws(monkeypatch):
    """The removal walk takes the finding walk's views of a page; a form XObject shared with a page rewritten
    before it has lost the value's glyphs there, so that page's views are built again from what it now draws (the
    cost criterion of issue 46: each page's views were built twice)."""
    pdf = pikepdf.new()
    font = pdf.make_indirect(pikepdf.Dictionary(Type=Name.Font, Subtype=Name.Type1, BaseFont=Name.Helvetica))
    resources = pikepdf.Dictionary(Font=pikepdf.Dictionary(F1=font))
    form = pdf.make_stream(
        b"BT /F1 12 Tf 72 700 Td (Applicant national id: 987-65-4321 on file) Tj ET",
        Type=Name.XObject,
        Subtype=Name.Form,
        BBox=[0, 0, 612, 792],
        Resources=resources,
    )
    for contents in (b"q /X Do Q", b"q /X Do Q", b"BT /F1 12 Tf 72 600 Td (a page of its own) Tj ET"):
        pdf.add_blank_page(page_size=(612, 792))
        pdf.pages[-1].obj.Resources = pikepdf.Dictionary(XObject=pikepdf.Dictionary(X=form), Font=resources.Font)
        pdf.pages[-1].obj.Contents = pdf.make_stream(contents)
    out = io.BytesIO()
    pdf.save(out)
    built = []
    views = redact._page_views
    monkeypatch.setattr(redact, "_page_views", lambda page: built.append(page.text) or views(page))
    result = _redact_pure(out.getvalue())
    assert result.summary["removed"] == {"national_id": 1}
    # finding: the three pages; removing: only the second page, whose form lost the value on the first
    assert len(built) == 4 and "987-65-4321" not in built[3] and built[1] == built[0]
    written = result.artifacts[result.secret["derivative"]]
    verify_derivative({result.secret["derivative"]: io.BytesIO(written)}, result)


@pytest.mark.parametrize(
    "content",
    [
        b"BT /F1 (x) Tf (123-45-6789) Tj ET",  # a string for a size
        b"BT (123-45-6789) Tj ET",  # no font
        b"BT /F7 12 Tf (123-45-6789) Tj ET",  # a font the resources do not have
        b"1 0 0 cm BT ET",  # too few operands
        b"BT /F1 12 Tf [1 (a) /N] TJ ET",  # a name in a TJ array
        b"BT /F2 12 Tf <0001> Tj ET",  # a composite font without its descendant font
    ],
)
def test_content_the_redactor_cannot_read_is_refused_not_passed(content):
    with pytest.raises(EvidenceError) as refused:
        _redact_pure(_one_page(content))
    assert refused.value.code == ReasonCode.REDACTION_UNSUPPORTED_CONTENT


_CMAP_TEXT = "SSN 123-45-6789 on file"


def _composite(encoding) -> tuple[bytes, bytes]:
    """One page drawing _CMAP_TEXT in a composite font (not embedded) whose CMap is ``encoding``: a predefined
    name, its codes UTF-16 of the text; or an embedded CMap of one-byte codes (CID = code - 31) with a ToUnicode
    map. Its widths are by CID: 777 for the CID of "1" (18 in the predefined ones, as in the embedded one)."""
    pdf = pikepdf.new()
    pdf.add_blank_page(page_size=(612, 792))
    if isinstance(encoding, bytes):
        cmap = pdf.make_stream(encoding, Type=Name.CMap, CMapName=Name.Embedded)
        codes = _CMAP_TEXT.encode("ascii")
        ranges = "".join(f"<{c:02X}> <{c:04X}>\n" for c in range(32, 127))
        unicode = pdf.make_stream(f"{95} beginbfchar\n{ranges}endbfchar\n".encode())
    else:
        cmap, codes, unicode = Name(encoding), _CMAP_TEXT.encode("utf-16-be"), None
    descendant = pikepdf.Dictionary(
        Type=Name.Font,
        Subtype=Name.CIDFontType0,
        BaseFont=Name.STSong,
        CIDSystemInfo=pikepdf.Dictionary(
            Registry=pikepdf.String("Adobe"), Ordering=pikepdf.String("GB1"), Supplement=4
        ),
        FontDescriptor=pikepdf.Dictionary(
            Type=Name.FontDescriptor,
            FontName=Name.STSong,
            Flags=6,
            FontBBox=[0, -200, 1000, 900],
            ItalicAngle=0,
            Ascent=900,
            Descent=-200,
            CapHeight=700,
            StemV=80,
        ),
        DW=500,
        W=[18, [777]],
    )
    font = pikepdf.Dictionary(Type=Name.Font, Subtype=Name.Type0, BaseFont=Name.STSong, Encoding=cmap)
    font.DescendantFonts = [pdf.make_indirect(descendant)]
    if unicode is not None:
        font.ToUnicode = unicode
    page = pdf.pages[0]
    page.obj.Resources = pikepdf.Dictionary(Font=pikepdf.Dictionary(F2=pdf.make_indirect(font)))
    page.obj.Contents = pdf.make_stream(b"BT /F2 12 Tf 72 700 Td <" + codes.hex().encode() + b"> Tj ET")
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue(), codes


_EMBEDDED_CMAP = (
    b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /Embedded def\n"
    b"1 begincodespacerange <00> <FF> endcodespacerange\n1 begincidrange <20> <7E> 1 endcidrange\n"
    b"endcmap CMapName currentdict /CMap defineresource pop end end"
)


@pytest.mark.skipif(not pdftext.PREDEFINED_CMAPS.is_dir(), reason="poppler-data is not installed")
@pytest.mark.parametrize("encoding", ["/UniGB-UCS2-H", "/UniGB-UTF16-H", _EMBEDDED_CMAP])
def test_a_composite_font_with_a_unicode_or_embedded_cmap_is_read_and_redacted(encoding):
    """A composite font whose CMap is not Identity: one of Adobe's predefined Unicode CMaps (codes are UCS-2 or
    UTF-16 of the characters; CIDs, which the widths are by, from the CMap as poppler-data installs it), or a CMap
    embedded as a stream (its codespace, its CIDs; the text from the ToUnicode map). The walk splits the codes as
    the CMap says, spells the text, and measures each glyph by its CID's width; the value is removed."""
    data, codes = _composite(encoding)
    with pikepdf.open(io.BytesIO(data)) as pdf:
        walked = pdftext.walk_page(pdf.pages[0])
    assert walked.text.strip() == _CMAP_TEXT and len(walked.glyphs) == len(_CMAP_TEXT)
    one = walked.glyphs[_CMAP_TEXT.index("1")]
    assert one.width == pytest.approx(12 * 0.777)
    result = _redact_pure(data)
    derivative = result.artifacts[result.secret["derivative"]]
    assert result.summary["removed"] == {"national_id": 1} and "123-45-6789" not in pdftotext(derivative)
    assert "on file" in pdftotext(derivative)


@pytest.mark.parametrize("encoding", ["/NoSuchCMap-H", "/../../../etc/passwd"])
def test_a_composite_font_whose_cmap_is_not_installed_is_refused(encoding):
    """A CMap named that is neither Identity, embedded nor installed (a name is looked up only if it is one):
    its codes cannot be split into glyphs, a stable refusal."""
    with pytest.raises(EvidenceError) as refused:
        _redact_pure(_composite(encoding)[0])
    assert refused.value.code == ReasonCode.REDACTION_UNSUPPORTED_CONTENT and "CMap" in refused.value.message


def test_a_custom_encoding_without_a_unicode_map_is_read_by_its_glyph_names_and_redacted():
    """Codes A, B, C ... that a /Differences array names /one, /two ...: the bytes spell no digit, the glyph
    names (and the rendered page) do; the glyphs are removed from the content, not refused."""
    data = redaction_corpus.build(redaction_corpus.page_text_through_cipher)
    result = _redact_pure(data)
    derivative = result.artifacts[result.secret["derivative"]]
    assert result.summary["removed"] == {"national_id": 1} and result.summary["burned_regions"] == {}
    assert "123-45-6789" in pdftotext(data) and "123-45-6789" not in pdftotext(derivative)


def test_unbalanced_graphics_state_still_redacts():
    result = _redact_pure(_one_page(b"Q Q q BT /F1 12 Tf 10 100 Td (SSN 123-45-6789) Tj ET"))
    derivative = result.artifacts[result.secret["derivative"]]
    assert result.summary["removed"] == {"national_id": 1} and not any(found_in(derivative, "123-45-6789").values())


def _checkbox_form(fields: bytes) -> bytes:
    """One page of text (a national id) with a checkbox whose "on" appearance state is named /S, as a real tax
    form's is, in the AcroForm's ``fields`` entry."""
    appearance = hostile_pdfs.stream(b"0 g 2 2 16 16 re f", b"/Type /XObject /Subtype /Form /BBox [0 0 20 20]")
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 4 0 R /Annots [6 0 R] "
        b"/Resources << /Font << /F1 5 0 R >> >> >>"
    )
    return hostile_pdfs.raw_pdf(
        b"<< /Type /Catalog /Pages 2 0 R /AcroForm << /Fields " + fields + b" >> >>",
        hostile_pdfs.PAGES,
        page,
        hostile_pdfs.stream(b"BT /F1 12 Tf 10 100 Td (SSN 123-45-6789) Tj ET"),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Annot /Subtype /Widget /FT /Btn /T (agreed) /V /S /AS /S /Rect [10 10 30 30] /P 3 0 R "
        b"/AP << /N << /S 7 0 R /Off 8 0 R >> /D << /S 7 0 R /Off 8 0 R >> >> >>",
        appearance,
        appearance,
    )


@pytest.mark.parametrize(
    "fields",
    [
        b"[6 0 R]",  # the checkbox state /S alone (a dictionary's /S is no action type unless it is a name)
        b"6 0 R",  # /Fields the field itself, not an array of fields (LibreOffice)
        b"[6 0 R null 7]",  # entries that are no field
        b"<< /Kids 6 0 R >>",  # a dictionary where the array belongs, its /Kids one field
    ],
)
def test_a_form_with_objects_of_unexpected_type_is_redacted(fields):
    data = _checkbox_form(fields)
    result = _redact_pure(data)
    derivative = result.artifacts[result.secret["derivative"]]
    assert result.summary["removed"] == {"national_id": 1}
    assert "123-45-6789" in pdftotext(data) and not any(found_in(derivative, "123-45-6789").values())


def test_an_input_gone_from_the_store_is_redaction_input_missing(documents, intake):
    acme, _ = tokens(documents)
    approved(documents)
    with client(intake, acme) as http:
        document = upload(http, application(scanned_page=False)).json()
        job_id = redact_job(http, "gone", document["document_id"]).json()["job_id"]
        assert documents.document_store.erase(f"acme/{document['sha256']}")
        [outcome] = dispatch(documents)
        status = http.get(f"/v1/jobs/{job_id}").json()
    assert (outcome.state, status["reason"]) == ("rejected", ReasonCode.REDACTION_INPUT_MISSING)
    assert status["message"] == "an input is missing or not the bytes admitted (STORE_NOT_FOUND)"
    assert documents.archive.list(job_prefix(documents.document_jobs.job("acme", job_id))) == []


def test_an_input_the_gate_refuses_names_the_gates_code_and_keeps_its_message(documents, intake, backend):
    acme, _ = tokens(documents)
    approved(documents)
    with client(intake, acme) as http:
        document = upload(http, application(scanned_page=False)).json()  # it carries an attachment
        job_id = submit(
            http,
            "refused",
            {"operation": "redact", "inputs": [document["document_id"]], "options": {"active_content": "refuse"}},
        ).json()["job_id"]
        [outcome] = dispatch(documents)
        status = http.get(f"/v1/jobs/{job_id}").json()
    assert (outcome.state, status["reason"]) == ("rejected", "DOCUMENT_EMBEDDED_FILES")
    message = status["message"]
    assert "active content: DOCUMENT_EMBEDDED_FILES" in message  # what the gate found: codes, never a value
    [event] = [
        e["details"]
        for e in documents.ledger.events_of_type("job.rejected", tenant="acme")
        if e["details"]["job_id"] == job_id
    ]
    assert (event["reason"], event["message"]) == ("DOCUMENT_EMBEDDED_FILES", message)
    listed = CliRunner().invoke(main, ["dead-letter", "list"], env=intake_environment(backend) | INTAKE_OVERRIDES)
    assert job_id not in listed.output  # a gate's refusal is the job's outcome, not a dead letter (issue 30)


def _tampering(inputs, options, pinned):
    ORIGINAL_TAMPERER["tamper"]()  # someone with write access replaces the original while the job runs
    return redact.redact_document(inputs, options, pinned)


ORIGINAL_TAMPERER: dict = {}
TAMPERED = register(
    Operation(
        name="redact-original-tampered",
        processor=_tampering,
        options=ACTIVE_CONTENT_OPTION,
        pin_policy=templates.pin,
        verify=verify_derivative,
    )
)


def test_an_original_changed_during_the_job_stops_publication(documents, intake, monkeypatch):
    acme, _ = tokens(documents)
    approved(documents)
    data = application(scanned_page=False)
    monkeypatch.setitem(
        ORIGINAL_TAMPERER,
        "tamper",
        lambda: overwrite(documents, f"acme/{sha256_hex(data)}", data + b"\n% changed\n", documents.document_store),
    )
    with client(intake, acme) as http:
        document = upload(http, data).json()
        job_id = redact_job(http, "tampered", document["document_id"], TAMPERED.name).json()["job_id"]
        [outcome] = dispatch(documents)
    assert (outcome.state, outcome.reason) == ("rejected", ReasonCode.STORE_DIGEST_MISMATCH)
    assert documents.archive.list(job_prefix(documents.document_jobs.job("acme", job_id))) == []


def test_a_redacted_derivative_walks_back_to_the_uploaded_application(documents, intake):
    """`evidence lineage` on a derivative: the job's event and statement, then the upload; a changed derivative
    breaks the walk at its first link."""
    acme, _ = tokens(documents)
    approved(documents)
    with client(intake, acme) as http:
        document = upload(http, application(scanned_page=False)).json()
        job_id = redact_job(http, "redact-1", document["document_id"]).json()["job_id"]
        assert dispatch(documents)[0].state == "succeeded"
        outputs = http.get(f"/v1/jobs/{job_id}").json()["outputs"]
    [derivative] = [o["artifact_id"] for o in outputs if o["artifact_id"].endswith(".pdf")]
    walked = lineage(documents, derivative)
    assert walked["ok"], walked
    assert walked["links"][-1]["document_id"] == document["document_id"]  # it ends at the uploaded bytes
    overwrite(documents, derivative, documents.archive.get(derivative) + b"%")
    broken = lineage(documents, derivative)
    assert (broken["ok"], broken["code"]) == (False, "LINEAGE_DIGEST_MISMATCH")
    assert derivative in broken["link"]


def test_the_regions_of_a_page_are_read_on_sheets_the_engine_takes():
    """Regions laid out one under another for one reading: never a sheet taller than Tesseract reads (32,767
    pixels; a 1972 x 54,732 sheet crashed a real file's redaction); one region larger than that is refused."""
    pieces = [((0, 0, 100, 9000), 0, (100, 9000), Image.new("L", (100, 9000), 255)) for _ in range(8)]
    sheets = list(ocr._sheets(pieces))
    assert [len(sheet) for sheet in sheets] == [3, 3, 2]
    assert all(sum(piece[3].height + ocr._GAP for piece in sheet) + ocr._GAP <= 32_767 for sheet in sheets)
    huge = [((0, 0, 100, 40_000), 0, (100, 40_000), Image.new("L", (100, 40_000), 255))]
    with pytest.raises(EvidenceError) as refused:
        list(ocr._sheets(huge))
    assert refused.value.code == ReasonCode.REDACTION_UNSUPPORTED_CONTENT
