"""Signature check, split and merge, and `evidence lineage`: signed bundles made with pyHanko in the tests,
through the real intake server and the document worker, on both backends (SQLite + local archive, PostgreSQL +
S3 on a moto server)."""

from __future__ import annotations

import io
import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa
from dagster import DagsterInstance
from pypdf import PdfReader, PdfWriter
from pypdf.annotations import Link
from pypdf.generic import ArrayObject, DictionaryObject, IndirectObject, NameObject, NumberObject, TextStringObject

from evidence_pipeline.definitions import defs
from evidence_pipeline.documents import signature_check, worker
from evidence_pipeline.documents.derive import parse_parts, split_document
from evidence_pipeline.documents.gate import gate
from evidence_pipeline.documents.registry import ProcessorInput, operation
from evidence_pipeline.documents.worker import run_page
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger.chain import chain_hash
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.monthly.document_outcomes import close_month, counts, read_outcomes
from evidence_pipeline.runtime import RunInfo
from evidence_pipeline.synthetic import district_agreements as bundles
from evidence_pipeline_tests.support import split_merge
from evidence_pipeline_tests.support.cli import invoke
from evidence_pipeline_tests.support.document_jobs import dispatch
from evidence_pipeline_tests.support.document_sensor import tick
from evidence_pipeline_tests.support.etsi_schema import indications
from evidence_pipeline_tests.support.intake_server import client, error_code, submit, tokens, upload
from evidence_pipeline_tests.support.signed_bundles import modified, updated
from evidence_pipeline_tests.support.signers import admin_key_file
from evidence_pipeline_tests.support.split_merge import DISTRICT, PARTS, accept, pdfs, split_agreement, status, walk
from evidence_pipeline_tests.support.tampering import drop_append_only_guards, overwrite
from evidence_pipeline_tests.support.tools import require_tool

documents, environment, pki = split_merge.documents, split_merge.environment, split_merge.pki  # the fixtures


# --- the parts option ------------------------------------------------------------------------------------------


def test_the_parts_option_is_checked_and_normalized():
    assert parse_parts([{"name": "a", "pages": "1-2, 5"}, {"name": "b", "pages": "3"}]) == [
        {"name": "a", "pages": "1-2,5"},
        {"name": "b", "pages": "3"},
    ]
    split = operation("split")
    assert split.normalize({"parts": PARTS}) == {"parts": PARTS, "active_content": "refuse"}
    for parts in (
        [{"name": "a", "pages": "1-4"}, {"name": "b", "pages": "4-6"}],  # overlap
        [{"name": "a", "pages": "4-1"}],  # backwards
        [{"name": "a", "pages": "0"}],
        [{"name": "a", "pages": "1-x"}],
        [{"name": "a", "pages": "1"}, {"name": "a", "pages": "2"}],  # a name twice
        [{"name": "../a", "pages": "1"}],  # names become keys: slugs only
        [{"name": "a", "pages": "1", "extra": 1}],
        [],
        "1-4",
    ):
        with pytest.raises(EvidenceError) as refused:
            split.normalize({"parts": parts})
        assert refused.value.code == ReasonCode.OPTIONS_INVALID, parts
    with pytest.raises(EvidenceError) as missing:
        split.normalize({})
    assert missing.value.code == ReasonCode.OPTIONS_INVALID


def test_a_part_holds_only_its_own_pages():
    """A link into another page, a form field with a widget on another page: copying a page copies neither."""
    writer = PdfWriter()
    for _ in range(3):
        writer.add_blank_page(200, 200)
    writer.add_annotation(0, Link(rect=(10, 10, 50, 50), target_page_index=2))
    for n in (0, 1):  # one text field, a widget on each of the first two pages
        writer.add_annotation(
            n,
            DictionaryObject(
                {
                    NameObject("/Type"): NameObject("/Annot"),
                    NameObject("/Subtype"): NameObject("/Widget"),
                    NameObject("/Rect"): ArrayObject(
                        [NumberObject(0), NumberObject(0), NumberObject(9), NumberObject(9)]
                    ),
                }
            ),
        )
    field = writer._add_object(
        DictionaryObject(
            {
                NameObject("/FT"): NameObject("/Tx"),
                NameObject("/T"): TextStringObject("name"),
                NameObject("/Kids"): ArrayObject([page["/Annots"][-1] for page in writer.pages[:2]]),
            }
        )
    )
    for page in writer.pages[:2]:
        page["/Annots"][-1].get_object()[NameObject("/Parent")] = field
    out = io.BytesIO()
    writer.write(out)
    file = io.BytesIO(out.getvalue())
    document = ProcessorInput("doc_x", "0" * 64, len(out.getvalue()), gate(file), file)
    result = split_document([document], {"parts": [{"name": "first", "pages": "1"}]}, {})
    [part] = result.derived
    reader = PdfReader(io.BytesIO(part.data))
    objects = [IndirectObject(n, 0, reader).get_object() for n in range(1, int(reader.trailer["/Size"]))]
    assert [o.get("/Type") for o in objects if isinstance(o, dict)].count("/Page") == 1
    assert [a.get_object()["/Subtype"] for a in reader.pages[0]["/Annots"]] == ["/Widget"]  # its own, kept


# --- the signature check ---------------------------------------------------------------------------------------


def _check(pdf: bytes, pki) -> dict:
    gate(io.BytesIO(pdf))
    policy = signature_check.trust_policy(pki[1].root_pem, pki[0].root_pem)  # the stranger's root is not this one
    return signature_check.check_signatures(io.BytesIO(pdf), "0" * 64, policy, "sgc_test")


def _facts(record: dict) -> list[tuple]:
    return [
        (
            s["field"],
            s["page"],
            s["signed_revision"],
            s["coverage"],
            s["modifications_after_signing"],
            s["trusted"],
            s["intact"],
            s["findings"],
        )
        for s in record["signatures"]
    ]


def test_a_signature_whose_page_annotations_are_an_indirect_array_is_read(pki):
    """/Annots (and /Kids) may be references to arrays: the check follows them, as pdfsig and pyHanko do."""
    import pikepdf

    with pikepdf.open(io.BytesIO(bundles.district_agreement())) as pdf:
        for page in pdf.pages:
            if "/Annots" in page.obj:
                page.obj.Annots = pdf.make_indirect(page.obj.Annots)
        out = io.BytesIO()
        pdf.save(out)
    signed = bundles.sign(out.getvalue(), pki[0])
    assert _facts(_check(signed, pki)) == [("DistrictSignature", 5, 2, "entire_file", "none", True, True, [])]
    [part] = split_document(
        [ProcessorInput("doc_x", "0" * 64, len(signed), gate(io.BytesIO(signed)), io.BytesIO(signed))],
        {"parts": [{"name": "a", "pages": "5"}]},
        {},
    ).derived
    assert not gate(io.BytesIO(part.data)).signatures_present


def test_signed_bundles_get_their_signature_findings(pki):
    district, stranger = pki
    base = bundles.district_agreement()
    signed = bundles.sign(base, district)
    untrusted_policy = signature_check.trust_policy(stranger.root_pem, None)
    valid = _check(signed, pki)
    assert valid["outcome"] == "no_findings" and valid["revisions"] == 3
    assert _facts(valid) == [("DistrictSignature", 5, 3, "entire_file", "none", True, True, [])]
    assert valid["signatures"][0]["signing_time_claimed"] and valid["policy_version"].startswith("signature-check/")

    changed = _check(modified(signed), pki)  # drawn on page 1 after signing
    assert changed["outcome"] == "findings" and changed["revisions"] == 4
    assert _facts(changed) == [
        (
            "DistrictSignature",
            5,
            3,
            "entire_revision",
            "other",
            True,
            True,
            ["modified_after_signing", "docmdp_violated"],
        )
    ]

    untrusted = signature_check.check_signatures(io.BytesIO(signed), "0" * 64, untrusted_policy, "sgc_test")
    assert _facts(untrusted) == [("DistrictSignature", 5, 3, "entire_file", "none", False, True, ["untrusted"])]
    assert untrusted["signatures"][0]["trust_problem"] and untrusted["policy_version"] != valid["policy_version"]

    two = _check(
        bundles.sign(bundles.with_signature_field(signed, "Countersignature", 7), district, "Countersignature"), pki
    )
    assert two["outcome"] == "no_findings"  # a later signature is form filling, which the policy accepts
    assert _facts(two) == [
        ("DistrictSignature", 5, 3, "entire_revision", "form_filling", True, True, []),
        ("Countersignature", 7, 5, "entire_file", "none", True, True, []),
    ]

    later = _check(modified(bundles.sign(updated(base), district)), pki)
    assert later["revisions"] == 5  # signed in the fourth revision (an incremental update), then modified
    assert _facts(later) == [
        (
            "DistrictSignature",
            5,
            4,
            "entire_revision",
            "other",
            True,
            True,
            ["modified_after_signing", "docmdp_violated"],
        )
    ]

    broken = bytearray(signed)  # a byte inside the signed range: integrity, not trust
    at = broken.index(b"Exhibits, continued") if b"Exhibits, continued" in broken else len(base) // 2
    broken[at] ^= 0x01
    tampered = signature_check.check_signatures(
        io.BytesIO(bytes(broken)), "0" * 64, signature_check.trust_policy(district.root_pem, None), "sgc_test"
    )
    assert not tampered["signatures"][0]["intact"] and "digest_mismatch" in tampered["signatures"][0]["findings"]
    # the same roots trust this signer on the intact file: a broken digest says nothing about trust
    assert (tampered["signatures"][0]["trusted"], tampered["signatures"][0]["trust_problem"]) == (None, "not_evaluated")
    assert "untrusted" not in tampered["signatures"][0]["findings"]
    assert _check(base, pki)["outcome"] == "unsigned"
    with pytest.raises(EvidenceError) as misconfigured:
        signature_check.trust_policy(district.root_pem, b"not a certificate")
    assert misconfigured.value.code == ReasonCode.CONFIG_INVALID


# --- through the front door ------------------------------------------------------------------------------------


def _agreement_merged(documents, http, pki) -> dict:
    """Upload the signed agreement, split it into four, review each part, merge the approved ones."""
    signed = bundles.sign(bundles.district_agreement(), pki[0])
    upload_doc, split = split_agreement(http, documents, signed)
    assert (split["state"], split["stage"], split["reason"]) == ("succeeded", "completed", None), split
    parts = pdfs(split)
    reviews = {
        name: accept(
            http, f"review-{name}", {"operation": "contract-review", "inputs": [artifact], "options": DISTRICT}
        )
        for name, artifact in parts.items()
    }
    dispatch(documents, "run-reviews")
    statuses = {name: status(http, job_id) for name, job_id in reviews.items()}
    decided = {name: found["findings"]["decision"] for name, found in statuses.items()}
    approved = [parts[p.name] for p in bundles.PARTS if p.approved]
    merge_id = accept(http, "merge-1", {"operation": "merge", "inputs": approved})
    dispatch(documents, "run-merge")
    return {
        "upload": upload_doc,
        "split": split,
        "parts": parts,
        "decided": decided,
        "approved": approved,
        "reviews": statuses,
        "merge": status(http, merge_id),
        "signed": signed,
    }


def test_the_four_part_agreement_end_to_end(documents, intake, pki, environment, tmp_path):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        done = _agreement_merged(documents, http, pki)
        refused = submit(
            http,
            "merge-unapproved",
            {"operation": "merge", "inputs": [done["parts"]["data-processing-addendum"], done["parts"]["exhibits"]]},
        )
        unknown = submit(
            http,
            "merge-unknown",
            {
                "operation": "merge",
                "inputs": [done["parts"]["exhibits"].replace("exhibits", "nothing"), done["parts"]["exhibits"]],
            },
        )
    assert list(done["parts"]) == [p.name for p in bundles.PARTS]
    assert done["decided"] == {p.name: "approved" if p.approved else "rejected" for p in bundles.PARTS}
    assert (refused.status_code, error_code(refused)) == (422, "MERGE_INPUT_NOT_APPROVED")
    assert (unknown.status_code, error_code(unknown)) == (404, "DOCUMENT_NOT_FOUND")
    merge = done["merge"]
    assert (merge["state"], merge["stage"]) == ("succeeded", "completed"), merge
    archive, ledger = documents.archive, documents.ledger
    [merged_id] = pdfs(merge).values()
    merged = archive.get(merged_id)
    pages = [p.extract_text() for p in PdfReader(io.BytesIO(merged)).pages]
    assert len(pages) == 5 and "Master agreement, continued" in pages[1] and "Exhibits, continued" in pages[4]
    assert not any("Data processing addendum" in text for text in pages)  # the rejected part stays out
    # The upload is never modified; the rejected branch is kept.
    assert documents.document_store.get(f"acme/{done['upload']['sha256']}") == done["signed"]
    assert archive.exists(done["parts"]["data-processing-addendum"])

    # The signature check: its own stage, record, statement and event; the page that holds the signature.
    [checked] = ledger.events_of_type("signature.checked")
    check = checked["details"]
    assert check["outcome"] == "no_findings" and check["signatures"] == [
        {
            "field": "DistrictSignature",
            "page": 5,
            "signed_revision": 3,
            "findings": [],
            "etsi_indication": "total-passed",
        }
    ]
    assert checked["subject_sha256"] == done["upload"]["sha256"]
    record = json.loads(archive.get(check["record"]))
    assert (
        record["signature_check_id"] == check["signature_check_id"]
        and record["policy_version"] == check["policy_version"]
        and record["signatures"][0]["trusted"] is True
    )
    assert done["split"]["findings"]["signature_check"] == {
        k: check[k] for k in ("signature_check_id", "policy_version", "outcome", "signatures")
    }
    stages = [
        e["details"]["stage"]
        for e in ledger.events_of_type("document.stage")
        if e["details"]["job_id"] == done["split"]["job_id"]
    ]
    assert stages == ["validating", "signature_check", "splitting", "signing", "committing"]

    # Lineage on every derivative: manifest, statement and event agree.
    derived = {e["details"]["artifact_id"]: e for e in ledger.events_of_type("document.derived")}
    assert set(derived) == set(done["parts"].values()) | {merged_id}
    part = derived[done["parts"]["signature-page"]]["details"]["lineage"]
    assert part == {
        "original_digest": done["upload"]["sha256"],
        "parent_artifact_ids": [done["upload"]["document_id"]],
        "operation": "split",
        "policy_version": documents.settings.policy_version,
        "output_digest": derived[done["parts"]["signature-page"]]["subject_sha256"],
        "signature_check_id": check["signature_check_id"],
        "derivation_id": part["derivation_id"],
    }
    merged_lineage = derived[merged_id]["details"]["lineage"]
    assert merged_lineage["parent_artifact_ids"] == done["approved"] and merged_lineage["operation"] == "merge"
    assert merged_lineage["signature_check_id"] == check["signature_check_id"]
    assert [r["artifact_id"] for r in merged_lineage["reviews"]] == done["approved"]
    manifest = json.loads(archive.get(merged_id.replace(".pdf", ".manifest.json")))
    assert manifest["lineage"] == merged_lineage

    # No derivative carries a signature of its parent: pdfsig finds none.
    pdfsig = require_tool("pdfsig")
    for artifact_id in [*done["parts"].values(), merged_id]:
        path = tmp_path / artifact_id.rsplit("/", 1)[1]
        path.write_bytes(archive.get(artifact_id))
        shown = subprocess.run([pdfsig, str(path)], capture_output=True, text=True)
        assert "does not contain any signatures" in shown.stdout + shown.stderr, shown.stdout
        assert b"/ByteRange" not in path.read_bytes() and b"/DSS" not in path.read_bytes()
        assert b"/Perms" not in path.read_bytes() and b"/AcroForm" not in path.read_bytes()
        signed_copy = path.with_suffix(".derived-by.pdf")  # the service's "derived by" signature, and only it
        signed_copy.write_bytes(archive.get(artifact_id.replace(".pdf", ".derived-by.pdf")))
        shown = subprocess.run([pdfsig, str(signed_copy)], capture_output=True, text=True).stdout
        assert "Signature #1" in shown and "Signature #2" not in shown and "EvidenceDerivedBy" in shown, shown
        assert signed_copy.read_bytes().startswith(path.read_bytes())
    source = tmp_path / "upload.pdf"
    source.write_bytes(done["signed"])
    assert "Signature #1" in subprocess.run([pdfsig, str(source)], capture_output=True, text=True).stdout

    # `evidence lineage` walks from the merge back to the upload.
    walked = invoke(["lineage", merged_id, "--json"], environment)
    assert walked.exit_code == 0, walked.output
    report = json.loads(walked.output)
    assert report["ok"] and report["code"] is None
    kinds = [link["link"] for link in report["links"]]
    assert kinds.count("review") == 3 and kinds.count("upload") == 3 and kinds.count("signature_check") == 3
    assert kinds[0] == "derivative" and kinds.count("derivative") == 4
    assert walk(environment, merged_id.replace(".pdf", ".derived-by.pdf"))[0] == 0  # the signed copy's id
    text = invoke(["lineage", merged_id], environment)
    assert text.exit_code == 0 and "LINEAGE HOLDS" in text.output
    verified = invoke(["verify", merged_id], environment)  # `evidence verify` takes document artifacts too
    assert verified.exit_code == 0 and "LINEAGE HOLDS" in verified.output
    for artifact_id in done["parts"].values():  # and from any part, the rejected one included
        assert invoke(["lineage", artifact_id], environment).exit_code == 0
    approval = next(
        o["artifact_id"]
        for o in done["reviews"]["signature-page"]["outputs"]
        if o["artifact_id"].endswith("/approved.pdf")
    )  # a review's output: job → part → … → upload
    code, report = walk(environment, approval)
    assert code == 0 and [link["link"] for link in report["links"]] == [
        "job_output",
        "derivative",
        "signature_check",
        "upload",
    ]
    nothing = invoke(["lineage", "documents/acme/derived/nothing.pdf", "--json"], environment)
    assert nothing.exit_code == 2 and json.loads(nothing.output)["error"]["code"] == "LINEAGE_NOT_FOUND"

    # The month's document outcomes, which the monthly report prints, list the split, the reviews and the merge.
    period = documents.document_jobs.job("acme", merge["job_id"]).period
    revision, _ = close_month(documents.sources, documents.document_jobs, TenantMonth("acme", period))
    listed = {(o, state) for o, state, _ in counts(read_outcomes(documents.sources, revision))}
    review = documents.document_jobs.job("acme", done["reviews"]["signature-page"]["job_id"])
    ruleset = review.request["options"]["ruleset"]
    assert listed >= {
        ("split", "succeeded"),
        (f"contract-review @ {ruleset}", "succeeded: approved"),
        (f"contract-review @ {ruleset}", "rejected: rejected (REVIEW_POLICY_REJECTED)"),
        ("merge", "succeeded"),
    }


def test_a_split_attaches_the_etsi_report_of_each_incoming_signature(documents, intake, pki):
    """The signature check's record carries, per signature, the ETSI TS 119 102-2 report `evidence verify` writes
    (valid against the standard's schema), with the indication the check reached: intact and trusted, intact and
    untrusted (the stranger's root is not in the policy), not intact. The tenant downloads record and reports as
    the split's outputs; the same bytes split again give the same report bytes."""
    district, stranger = pki
    signed = bundles.sign(bundles.district_agreement(), district)
    broken = signed.replace(b"/Producer (pypdf)", b"/Producer (pypdg)", 1)  # a byte inside the signed range
    cases = {
        "trusted": (signed, "total-passed", ["OK"], []),
        "untrusted": (
            bundles.sign(bundles.district_agreement(), stranger),
            "indeterminate",
            ["CERTIFICATE_CHAIN_GENERAL_FAILURE"],
            ["untrusted"],
        ),
        "tampered": (broken, "total-failed", ["HASH_FAILURE"], ["digest_mismatch"]),
    }
    acme, _ = tokens(documents)
    reports = {}
    with client(intake, acme) as http:
        for name, (pdf, indication, sub, findings) in cases.items():
            _, split = split_agreement(
                http, documents, pdf, key=f"split-{name}", parts=[{"name": "all", "pages": "1-7"}]
            )
            assert split["state"] == "succeeded", (name, split["reason"], split.get("message"))
            [signature] = split["findings"]["signature_check"]["signatures"]
            assert (signature["findings"], signature["etsi_indication"]) == (findings, indication), name
            outputs = {o["name"]: o for o in http.get(f"/v1/jobs/{split['job_id']}/outputs").json()["outputs"]}
            report = http.get(outputs["signature_check.1.etsi.xml"]["url"])
            assert report.headers["content-type"] == "application/xml"
            assert indications(report.content) == (indication, sub), name
            record = http.get(outputs["signature_check.json"]["url"]).json()
            assert record["signatures"][0]["findings"] == findings
            reports[name] = outputs["signature_check.1.etsi.xml"]
        _, again = split_agreement(
            http, documents, signed, key="split-trusted-again", parts=[{"name": "p1", "pages": "1"}]
        )
        outputs = {o["name"]: o for o in http.get(f"/v1/jobs/{again['job_id']}/outputs").json()["outputs"]}
    assert outputs["signature_check.1.etsi.xml"] == reports["trusted"] | {
        "url": outputs["signature_check.1.etsi.xml"]["url"]
    }  # the same object, put once
    assert len(documents.ledger.events_of_type("signature.checked")) == 3  # one per check


def test_a_signature_check_stated_before_etsi_reports_is_adopted_by_a_later_split(documents, intake, pki, monkeypatch):
    """A deployment that checked a signature before the check's statement listed ETSI reports splits the same bytes
    again: the stored statement is adopted as it is (stored data is never rewritten), and the new job still
    serves the report."""
    signed = bundles.sign(bundles.district_agreement(), pki[0])
    put = worker._put_statement
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        with monkeypatch.context() as before_reports:  # what the previous version wrote: no reports, none stated
            before_reports.setattr(worker, "_etsi_reports", lambda *args, **kwargs: {})
            before_reports.setattr(
                worker,
                "_put_statement",
                lambda rt, key, *, predicate, **kwargs: put(
                    rt, key, predicate={k: v for k, v in predicate.items() if k != "etsi_reports"}, **kwargs
                ),
            )
            _, first = split_agreement(
                http, documents, signed, key="split-before", parts=[{"name": "all", "pages": "1-7"}]
            )
        _, again = split_agreement(http, documents, signed, key="split-after", parts=[{"name": "p1", "pages": "1"}])
        outputs = {o["name"] for o in http.get(f"/v1/jobs/{again['job_id']}/outputs").json()["outputs"]}
    assert (first["state"], again["state"]) == ("succeeded", "succeeded"), (again["reason"], again.get("message"))
    assert "signature_check.1.etsi.xml" in outputs


@pytest.mark.slow
def test_tampering_with_any_link_fails_the_walk_naming_it(documents, intake, pki, environment):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        done = _agreement_merged(documents, http, pki)
    rt = documents
    [merged_id] = pdfs(done["merge"]).values()
    exhibits, master = done["parts"]["exhibits"], done["parts"]["master-agreement"]
    assert walk(environment, merged_id)[0] == 0

    [review] = [r for r in rt.ledger.events_of_type("document.derived") if r["details"]["artifact_id"] == merged_id][0][
        "details"
    ]["lineage"]["reviews"][:1]
    decision_key = next(
        a["key"]
        for a in rt.ledger.events_of_type("document.published")
        if a["details"]["job_id"] == review["review_job_id"]
        for a in a["details"]["artifacts"]
        if a["name"] == "decision.json"
    )
    [checked] = rt.ledger.events_of_type("signature.checked")
    record_key, check_id = checked["details"]["record"], checked["details"]["signature_check_id"]
    [report_key] = [report["key"] for report in checked["details"]["etsi_reports"]]
    original = rt.archive.get(exhibits)
    assert original.endswith(b"%%EOF\n")
    archive, store = rt.archive, documents.document_store
    cases = [  # (the object, what replaces it, in which store, where the walk starts, the code, the link it names)
        (
            exhibits,
            original[:-6] + b"%%EOF\n%\n",
            archive,
            merged_id,  # an intermediate artifact's bytes
            "LINEAGE_DIGEST_MISMATCH",
            f"split {exhibits}",
        ),
        (
            exhibits.replace(".pdf", ".derived-by.pdf"),
            archive.get(master.replace(".pdf", ".derived-by.pdf")),
            archive,
            merged_id,
            "LINEAGE_DIGEST_MISMATCH",
            f"split {exhibits}",
        ),  # its signed copy, another part's
        (
            master.replace(".pdf", ".statement.dsse.json"),  # a statement: validly signed, about another part
            archive.get(exhibits.replace(".pdf", ".statement.dsse.json")),
            archive,
            merged_id,
            "LINEAGE_STATEMENT_INVALID",
            f"split {master}",
        ),
        (
            decision_key,
            archive.get(decision_key).replace(b'"approved"', b'"approved" '),
            archive,
            merged_id,
            "LINEAGE_DIGEST_MISMATCH",
            f"review {review['review_job_id']} of {master}",
        ),
        (
            record_key,
            archive.get(record_key).replace(b'"no_findings"', b'"findings"'),
            archive,
            master,
            "LINEAGE_DIGEST_MISMATCH",
            f"signature check {check_id}",
        ),
        (
            report_key,
            archive.get(report_key).replace(b"total-passed", b"total-failed"),
            archive,
            master,
            "LINEAGE_DIGEST_MISMATCH",
            f"signature check {check_id}",
        ),  # the check's ETSI report
        (
            f"acme/{done['upload']['sha256']}",
            done["signed"] + b"\n",
            store,
            master,  # the upload's bytes
            "LINEAGE_DIGEST_MISMATCH",
            f"upload {done['upload']['document_id']}",
        ),
    ]
    for key, data, where, start, expected_code, expected_link in cases:
        kept = where.get(key)
        overwrite(rt, key, data, where)
        code, report = walk(environment, start)
        assert (code, report["code"], report["link"]) == (1, expected_code, expected_link), key
        assert invoke(["verify", start], environment).exit_code == 1
        overwrite(rt, key, kept, where)
        assert walk(environment, merged_id)[0] == 0

    # A ledger row: the exhibits part's document.derived event rewritten in place.
    drop_append_only_guards(rt.ledger)
    events = rt.ledger.audit_events
    with rt.ledger.engine.begin() as conn:
        [(seq, body)] = [
            (seq, body)
            for seq, body in conn.execute(
                sa.select(events.c.seq, events.c.body).where(events.c.event_type == "document.derived")
            )
            if json.loads(body)["details"]["artifact_id"] == exhibits
        ]
        rewritten = body.replace('"name":"exhibits"', '"name":"exhibit-c"')
        assert rewritten != body
        conn.execute(events.update().where(events.c.seq == seq).values(body=rewritten))
    code, report = walk(environment, merged_id)
    assert (code, report["code"], report["link"]) == (1, "LINEAGE_EVENT_INVALID", f"split {exhibits}")
    assert "breaks the hash chain" in report["message"]
    with rt.ledger.engine.begin() as conn:  # and with its own hash recomputed: the next event no longer chains
        prev_hash = conn.execute(sa.select(events.c.prev_hash).where(events.c.seq == seq)).scalar()
        conn.execute(events.update().where(events.c.seq == seq).values(event_hash=chain_hash(prev_hash, rewritten)))
    code, report = walk(environment, merged_id)
    assert (code, report["code"], report["link"]) == (1, "LINEAGE_EVENT_INVALID", f"split {exhibits}")


def test_unapproved_merge_inputs_are_refused_at_admission(documents, intake, pki):
    acme, globex = tokens(documents)
    with client(intake, acme) as http:
        _, split = split_agreement(http, documents, bundles.sign(bundles.district_agreement(), pki[0]))
        parts = pdfs(split)
        pair = [parts["exhibits"], parts["master-agreement"]]
        unreviewed = submit(http, "m1", {"operation": "merge", "inputs": pair})
        addendum = parts["data-processing-addendum"]
        review_id = accept(http, "r1", {"operation": "contract-review", "inputs": [addendum], "options": DISTRICT})
        dispatch(documents, "run-r")
        assert status(http, review_id)["state"] == "rejected"
        rejected = submit(
            http, "m2", {"operation": "merge", "inputs": [parts["data-processing-addendum"], parts["exhibits"]]}
        )
        uploads = submit(http, "m3", {"operation": "merge", "inputs": [split["inputs"][0], split["inputs"][0]]})
    with client(intake, globex) as other:  # another tenant's artifacts do not exist for this one
        foreign = submit(other, "m4", {"operation": "merge", "inputs": [parts["exhibits"], parts["master-agreement"]]})
    for refused in (unreviewed, rejected, uploads):
        assert (refused.status_code, error_code(refused)) == (422, "MERGE_INPUT_NOT_APPROVED")
    assert (foreign.status_code, error_code(foreign)) == (404, "DOCUMENT_NOT_FOUND")


def test_a_merge_of_parts_of_two_originals_is_refused(documents, intake, pki):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        masters = []
        for n, pdf in enumerate((bundles.district_agreement(), bundles.sign(bundles.district_agreement(), pki[0]))):
            _, split = split_agreement(http, documents, pdf, f"split-{n}", [{"name": "master", "pages": "1"}])
            masters.append(pdfs(split)["master"])
            accept(http, f"review-{n}", {"operation": "contract-review", "inputs": [masters[-1]], "options": DISTRICT})
        dispatch(documents, "run-reviews")
        refused = submit(http, "merge", {"operation": "merge", "inputs": masters})
    assert masters[0] != masters[1] and (refused.status_code, error_code(refused)) == (422, "INPUTS_INVALID")


def test_the_same_request_twice_converges_on_the_same_output(documents, intake, pki):
    acme, _ = tokens(documents)
    signed = bundles.sign(bundles.district_agreement(), pki[0])
    with client(intake, acme) as http:
        _, first = split_agreement(http, documents, signed, "split-a")
        _, again = split_agreement(http, documents, signed, "split-b")  # another idempotency key, the same content
        _, other = split_agreement(http, documents, signed, "split-c", [{"name": "all", "pages": "1-7"}])
        bad = split_agreement(http, documents, signed, "split-d", [{"name": "beyond", "pages": "7-9"}])[1]
    assert first["job_id"] != again["job_id"] and (first["state"], again["state"]) == ("succeeded", "succeeded")
    derived = [(o["artifact_id"], o["sha256"]) for o in first["outputs"] if "/derived/" in o["artifact_id"]]
    assert derived == [(o["artifact_id"], o["sha256"]) for o in again["outputs"] if "/derived/" in o["artifact_id"]]
    assert len(derived) == 16  # a PDF, statement, manifest and signed copy per part (the same copy: adopted)
    ledger = documents.ledger
    assert len(ledger.events_of_type("document.derived")) == 4 + 1  # once per artifact, whichever job
    assert len(ledger.events_of_type("signature.checked")) == 1  # once per bytes and policy
    assert pdfs(other)["all"] not in dict(derived)
    assert (bad["state"], bad["reason"], bad["outputs"]) == ("rejected", "OPTIONS_INVALID", [])


def test_a_page_run_splits_and_records_a_bad_range_as_an_outcome(
    backend, documents, intake, pki, environment, monkeypatch
):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)  # the Dagster resource reads the same environment
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        document = upload(http, bundles.sign(bundles.district_agreement(), pki[0])).json()
        jobs = [
            accept(http, key, {"operation": "split", "inputs": [document["document_id"]], "options": {"parts": parts}})
            for key, parts in (("good", PARTS), ("beyond", [{"name": "beyond", "pages": "7-9"}]))
        ]
        with DagsterInstance.ephemeral() as instance:
            instance.add_dynamic_partitions("tenant", ["acme"])
            [request] = tick(instance).run_requests
            result = defs.get_job_def("document_page_job").execute_in_process(
                run_config=request.run_config, instance=instance, tags=request.tags, raise_on_error=False
            )
        good, beyond = (status(http, job_id) for job_id in jobs)
    assert result.success  # a range beyond the document is the job's outcome, not the run's failure
    assert (good["state"], len(pdfs(good))) == ("succeeded", 4)
    assert (beyond["state"], beyond["stage"], beyond["reason"]) == ("rejected", "rejected", "OPTIONS_INVALID")


def test_two_runs_of_one_split_at_once_make_one_set_of_outputs(documents, intake, pki):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        document = upload(http, bundles.sign(bundles.district_agreement(), pki[0])).json()
        job_id = accept(
            http, "split-1", {"operation": "split", "inputs": [document["document_id"]], "options": {"parts": PARTS}}
        )
        documents.pages.assign_pages(10)
        [(page_id, _, _)] = documents.pages.open_pages()
        with ThreadPoolExecutor(2) as pool:
            runs = list(pool.map(lambda run: run_page(documents, page_id, RunInfo(run)), ("run-a", "run-b")))
        finished = status(http, job_id)
    outcomes = sorted((o.state, o.reason or "") for [o] in runs)
    assert outcomes in ([("running", "LEASE_BUSY"), ("succeeded", "")], [("succeeded", ""), ("succeeded", "")])
    assert finished["state"] == "succeeded" and len(pdfs(finished)) == 4
    ledger = documents.ledger
    assert len(ledger.events_of_type("document.published")) == 1
    assert len(ledger.events_of_type("document.derived")) == 4 and len(ledger.events_of_type("signature.checked")) == 1
    [prefix] = {o["artifact_id"].rsplit("/", 1)[0] for o in finished["outputs"] if "/derived/" in o["artifact_id"]}
    assert len(documents.archive.list(prefix)) == 16


def test_the_same_request_after_a_key_rotation_adopts_what_the_earlier_key_signed(documents, intake, pki, environment):
    """Content-addressed statements were signed by the key active then: the new key's job adopts them (they still
    verify), instead of failing put-once on an object of different bytes."""
    acme, _ = tokens(documents)
    signed = bundles.sign(bundles.district_agreement(), pki[0])
    with client(intake, acme) as http:
        _, first = split_agreement(http, documents, signed, "split-a")
        rotated = invoke(["keys", "rotate"], environment | {"EVIDENCE_ACTOR_KEY": admin_key_file(environment)})
        assert rotated.exit_code == 0, rotated.output
        _, again = split_agreement(http, documents, signed, "split-b")
    assert (first["state"], again["state"]) == ("succeeded", "succeeded"), again
    derived = [(o["artifact_id"], o["sha256"]) for o in first["outputs"] if "/derived/" in o["artifact_id"]]
    assert derived == [(o["artifact_id"], o["sha256"]) for o in again["outputs"] if "/derived/" in o["artifact_id"]]
    merged_code, walked = walk(environment, pdfs(again)["signature-page"])
    assert merged_code == 0, walked
