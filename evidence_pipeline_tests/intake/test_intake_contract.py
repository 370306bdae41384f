"""The tenant API's published contract (/openapi.json): a valid OpenAPI 3.1 document that names every reason code
the server maps, real responses that conform to it, and Schemathesis's generated requests against a live server
finding no 5xx and no answer outside the contract."""

from __future__ import annotations

import hashlib
import json

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from openapi_spec_validator import validate
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from evidence_pipeline.errors import ReasonCode
from evidence_pipeline.intake import openapi
from evidence_pipeline.intake.app import CONTRACT, STATUS
from evidence_pipeline_tests.support.contract import conforms
from evidence_pipeline_tests.support.intake_server import client, pdf_bytes, submit, tokens, upload

# Examples per operation: enough to reach every branch the schema describes, bounded so the run stays short.
EXAMPLES = 30


def test_the_contract_is_valid_openapi_3_1_and_served(intake):
    validate(CONTRACT)
    served = httpx.get(f"{intake}/openapi.json")
    assert served.status_code == 200 and served.json() == json.loads(json.dumps(CONTRACT))


def test_every_reason_code_the_server_answers_with_is_in_the_contract():
    named = {code for operation in openapi.OPERATIONS.values() for code in operation[4]} | set(openapi._ALWAYS)
    routing = {ReasonCode.ROUTE_NOT_FOUND, ReasonCode.METHOD_NOT_ALLOWED}  # no operation answers these
    assert set(STATUS) - routing <= named and named <= set(STATUS)


def test_real_responses_conform_to_the_contract(documents, intake):
    acme, globex = tokens(documents)
    data = pdf_bytes()
    with client(intake, acme) as http, client(intake, globex) as other, client(intake) as anonymous:
        answers = [
            ("post", "/v1/documents", upload(http, data)),
            ("post", "/v1/documents", upload(http, data)),  # the same bytes again: 200
            ("post", "/v1/documents", upload(http, data, **{"X-Content-SHA256": "0" * 64})),
            ("post", "/v1/documents", upload(http, b"not a pdf")),
            ("post", "/v1/documents", http.post("/v1/documents", content=data)),  # no Content-Type
            ("post", "/v1/documents", upload(anonymous, data)),
        ]
        document_id = answers[0][2].json()["document_id"]
        inspect = {"operation": "inspect", "inputs": [document_id]}
        accepted = submit(http, "k1", inspect)
        job = accepted.json()["job_id"]
        answers += [
            ("post", "/v1/jobs", accepted),
            ("post", "/v1/jobs", submit(http, "k1", inspect)),
            ("post", "/v1/jobs", submit(http, "k1", {**inspect, "options": {"active_content": "flag"}})),
            ("post", "/v1/jobs", submit(http, None, inspect)),
            ("post", "/v1/jobs", submit(http, "k2", {"operation": "nope", "inputs": [document_id]})),
            ("post", "/v1/jobs", submit(other, "k3", inspect)),  # another tenant's document
            (
                "post",
                "/v1/jobs",
                http.post(
                    "/v1/jobs",
                    content=b"[" * 40 + b"]" * 40,
                    headers={"Idempotency-Key": "k4", "Content-Type": "application/json"},
                ),
            ),
            ("get", "/v1/jobs/{job_id}", http.get(f"/v1/jobs/{job}")),
            ("get", "/v1/jobs/{job_id}", other.get(f"/v1/jobs/{job}")),
            (
                "post",
                "/v1/evidence-jobs",
                http.post("/v1/evidence-jobs", json={"period": "13-2020"}, headers={"Idempotency-Key": "e1"}),
            ),
            (
                "post",
                "/v1/evidence-jobs",
                http.post("/v1/evidence-jobs", json={"period": "2999-01"}, headers={"Idempotency-Key": "e2"}),
            ),
        ]
        batch = http.post("/v1/batches", json={"jobs": [{"idempotency_key": "b1", **inspect}]})
        batch_id = batch.json()["batch_id"]
        odd_key = http.post("/v1/batches", json={"jobs": [{"idempotency_key": {}, **inspect}]})
        answers += [
            ("post", "/v1/batches", batch),
            ("post", "/v1/batches", odd_key),
            ("post", "/v1/batches", http.post("/v1/batches", json={"jobs": []})),
            ("get", "/v1/batches/{batch_id}", http.get(f"/v1/batches/{batch_id}")),
            ("get", "/v1/batches/{batch_id}", other.get(f"/v1/batches/{batch_id}")),
            ("post", "/v1/batches/{batch_id}/cancel", http.post(f"/v1/batches/{batch_id}/cancel")),
            ("get", "/healthz", anonymous.get("/healthz")),
        ]
    for method, template, response in answers:
        conforms(method, template, response)
    assert odd_key.status_code == 400  # a batch spec's key that is not a string (Schemathesis found a 500)
    statuses = {response.status_code for _, _, response in answers}
    assert {200, 201, 202, 400, 401, 404, 409, 415, 422} <= statuses
    assert hashlib.sha256(data).hexdigest() == answers[0][2].json()["sha256"]


# Upload bodies: real PDFs (admitted once, then the same bytes again) and arbitrary bytes (refused).
schemathesis.openapi.media_type(
    "application/pdf", st.one_of(st.sampled_from([pdf_bytes(1), pdf_bytes(2)]), st.binary(max_size=4096))
)
SCHEMA = schemathesis.openapi.from_dict(CONTRACT)
# A hang guard, not a time bound: with the suite's workers reading pages by OCR on two cores, an upload through
# moto and PostgreSQL waited past Schemathesis's default of 10 s (twice in full runs; alone, none comes near it)
HANG = 120


@pytest.fixture
def live(documents, intake):
    """The live server and a tenant's token, with one document on record for the generated requests to name."""
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        upload(http, pdf_bytes())
    return intake, acme


@SCHEMA.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_generated_requests_find_no_server_error_and_nothing_outside_the_contract(case, live):
    url, token = live
    if case.path != "/healthz":
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {token}"}
    response = case.call(base_url=url, timeout=HANG)
    case.validate_response(
        response,
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_headers_conformance,
            response_schema_conformance,
        ],
    )
    assert "Traceback" not in response.text
