"""`PUT /v1/sources/{period}` on a real server, on both backends: a tenant publishes its month with its token
(201, then 200 and the same revision for the same rows), Idempotency-Key semantics (the same request again: 200;
another body or period under the key: 409, nothing stored), a file that breaks the format answers 422 with its
per-row report, racing publications get distinct sequences, and every answer is one the contract declares."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor

from evidence_pipeline.models import EventType, TenantMonth
from evidence_pipeline.monthly import source_format, sources
from evidence_pipeline.synthetic.demo_data import demo_transactions
from evidence_pipeline_tests.support.contract import conforms
from evidence_pipeline_tests.support.intake_server import client, error_code, tokens
from evidence_pipeline_tests.support.signers import signers_of

TEMPLATE = "/v1/sources/{period}"
PERIOD = "2026-07"


def _csv(variant: int = 0, period: str = PERIOD) -> bytes:
    frame = demo_transactions(TenantMonth("acme-books", period))
    frame.loc[0, "amount_minor"] = 100 + variant
    return frame.to_csv(index=False).encode()


def _put(http, data: bytes, period: str = PERIOD, key: str | None = None, **headers):
    headers = {"Content-Type": "text/csv; charset=utf-8", **({"Idempotency-Key": key} if key else {}), **headers}
    return http.put(f"/v1/sources/{period}", content=data, headers=headers)


def test_a_tenant_publishes_its_month_and_the_same_rows_again_are_the_same_revision(documents, intake):
    acme, globex = tokens(documents)
    rt = documents
    with client(intake, acme) as http, client(intake, globex) as other:
        first = _put(http, _csv())
        again = _put(http, _csv())
        theirs = _put(other, _csv())  # the tenant is the token's: globex's own month
        for response in (first, again, theirs):
            conforms("put", TEMPLATE, response)
    assert (first.status_code, again.status_code, theirs.status_code) == (201, 200, 201)
    assert again.json() == first.json()  # the revision and the event that published it
    body = first.json()
    revision = sources.pin_latest(rt.sources, TenantMonth("acme", PERIOD))
    assert (body["tenant"], body["period"], body["sequence"], body["sha256"]) == ("acme", PERIOD, 1, revision.sha256)
    assert sources.pin_latest(rt.sources, TenantMonth("globex", PERIOD)).sha256 == revision.sha256
    [event] = rt.ledger.events_of_type(EventType.SOURCE_PUBLISHED, "acme")
    details = event["details"]
    assert event["actor"] == "intake" and details["token_id"].startswith("tok_")
    assert details["correlation_id"] == body["correlation_id"] and details["rows"] == body["rows"]
    assert acme not in str(event)  # the token's id, never the token


def test_idempotency_key_answers_the_same_revision_and_refuses_another_body_or_period(documents, intake):
    acme, _ = tokens(documents)
    rt = documents
    with client(intake, acme) as http:
        first = _put(http, _csv(1), key="month-1")
        again = _put(http, _csv(1), key="month-1")
        other_body = _put(http, _csv(2), key="month-1")
        other_period = _put(http, _csv(1, "2026-06"), period="2026-06", key="month-1")
        bad_key = _put(http, _csv(1), key="two words")
        for response in (first, again, other_body, other_period):
            conforms("put", TEMPLATE, response)
    assert (first.status_code, again.status_code, other_body.status_code) == (201, 200, 409)
    assert again.json()["sha256"] == first.json()["sha256"] and again.json()["sequence"] == 1
    assert error_code(other_body) == "IDEMPOTENCY_CONFLICT" and error_code(other_period) == "IDEMPOTENCY_CONFLICT"
    assert bad_key.status_code == 400
    assert [key for key in rt.sources.list("acme") if key.endswith(".csv")] == [
        sources.pin_latest(rt.sources, TenantMonth("acme", PERIOD)).key
    ]  # the refused bodies stored nothing
    assert len(rt.ledger.events_of_type(EventType.SOURCE_PUBLISHED, "acme")) == 1


def test_a_period_in_other_digits_than_ascii_is_period_invalid_and_stores_nothing(documents, intake):
    # \d matches Arabic-Indic digits and int() reads them: the month passed as 2026-07 under another name
    acme, _ = tokens(documents)
    period = "\u0662\u0660\u0662\u0666-07"
    with client(intake, acme) as http:
        refused = _put(http, _csv().decode().replace(PERIOD, period).encode(), period=period)
    assert (refused.status_code, error_code(refused)) == (422, "PERIOD_INVALID")
    assert documents.sources.list("acme") == []


def test_a_file_that_breaks_the_format_answers_its_report_and_stores_nothing(documents, intake):
    acme, _ = tokens(documents)
    bad = (
        b"txn_id,booked_on,kind,currency,amount_minor,channel\n"
        b"T1,2026-07-01,order,EUR,12,web\nT2,2026-07-01,x,EUR,0,web\n"
    )
    with client(intake, acme) as http:
        refused = _put(http, bad)
        conforms("put", TEMPLATE, refused)
        wrong_type = _put(http, _csv(), **{"Content-Type": "application/pdf"})
        conforms("put", TEMPLATE, wrong_type)
        wrong_digest = _put(http, _csv(), **{"X-Content-SHA256": hashlib.sha256(b"x").hexdigest()})
        conforms("put", TEMPLATE, wrong_digest)
        bad_period = _put(http, _csv(), period="2026-13")
        conforms("put", TEMPLATE, bad_period)
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "SOURCE_INVALID"
    assert refused.json()["error"]["problems"] == [
        {"line": 3, "column": "kind", "code": "SOURCE_VALUE_INVALID"},
        {"line": 3, "column": "amount_minor", "code": "SOURCE_VALUE_INVALID"},
    ]
    assert refused.json()["error"]["problems_total"] == 2
    assert (wrong_type.status_code, wrong_digest.status_code, bad_period.status_code) == (415, 400, 422)
    assert documents.sources.list("acme") == []


def test_a_file_above_the_limit_is_refused_before_it_is_read(documents, intake, monkeypatch):
    acme, _ = tokens(documents)
    monkeypatch.setattr(source_format, "MAX_BYTES", 1000)
    with client(intake, acme) as http:
        declared = _put(http, _csv())
        conforms("put", TEMPLATE, declared)
    assert declared.status_code == 413 and error_code(declared) == "SOURCE_TOO_LARGE"
    assert documents.sources.list("acme") == []


def test_racing_publications_of_one_month_get_distinct_sequences(documents, intake):
    acme, _ = tokens(documents)

    def put(variant: int):
        with client(intake, acme) as http:
            return _put(http, _csv(variant))

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(put, range(4)))
    assert [answer.status_code for answer in answers] == [201] * 4
    assert sorted(answer.json()["sequence"] for answer in answers) == [1, 2, 3, 4]
    events = documents.ledger.events_of_type(EventType.SOURCE_PUBLISHED, "acme")
    assert sorted(event["details"]["sequence"] for event in events) == [1, 2, 3, 4]


def test_a_correction_published_by_the_tenant_is_superseding_evidence_when_next_asked(runtime, documents, intake):
    """End to end: the month has a bundle; the tenant PUTs a corrected file; the month's next evidence pins the new
    revision, supersedes the bundle, and verifies."""
    from evidence_pipeline.audit.verify import verify_bundle
    from evidence_pipeline.monthly.pipeline import run_tenant_month
    from evidence_pipeline.runtime import RunInfo
    from evidence_pipeline_tests.support.fixture_sources import SMALL

    first = run_tenant_month(runtime, SMALL, RunInfo("before"))
    token = signers_of(documents.ledger).issue_token(SMALL.tenant)
    corrected = demo_transactions(SMALL)
    corrected.loc[0, "amount_minor"] += 100
    with client(intake, token) as http:
        put = _put(http, corrected.to_csv(index=False).encode(), period=SMALL.period)
    assert put.status_code == 201 and put.json()["sequence"] == 2
    second = run_tenant_month(runtime, SMALL, RunInfo("after"))
    assert second.created and second.supersedes["identity"] == first.identity
    assert second.source_sha256 == put.json()["sha256"]
    assert verify_bundle(runtime.archive, second.bundle_key).ok
