"""The auditor's reads of stored JSON of any shape: a manifest, statement, predicate or assessment that is JSON but
not the object its check expects (a list, a string, two subjects) fails that check with a reason code, never an
exception. The lineage walk runs here over a source held in memory (audit/lineage.py's Source), its statements
signed by a test key."""

import base64
import hashlib
import json

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline.audit import lineage, oscal
from evidence_pipeline.audit.bundle_proof import check_bundle_log
from evidence_pipeline.audit.package import tlog_proof_path
from evidence_pipeline.document_formats import PREDICATE_TYPE, STATEMENT
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import ChainedEvent, EventType
from evidence_pipeline.signing import dsse
from evidence_pipeline.store.local import LocalStore
from evidence_pipeline.witness.proof import HEADER

KEY = ed25519.Ed25519PrivateKey.generate()
OUTPUT = "documents/acme/redacted/job_1/redacted.pdf"
DERIVATIVE = "documents/acme/derived/job_2/part-1.pdf"
PDF = b"%PDF-1.7 the output"
INPUT = hashlib.sha256(b"the input").hexdigest()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Archive:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put(self, key: str, data: bytes) -> str:
        self.objects[key] = data
        return _sha256(data)

    def get(self, key: str) -> bytes:
        if key not in self.objects:
            raise EvidenceError(ReasonCode.STORE_NOT_FOUND, "no such object")
        return self.objects[key]

    def exists(self, key: str) -> bool:
        return key in self.objects


def _in_log(parsed: dict) -> ChainedEvent:
    """An event the source places in the log (its chain is not what these tests check)."""
    return ChainedEvent(1, "", "", json.dumps(parsed), parsed)


class _Source:
    """One tenant's events by (type, field value), every one in the log."""

    def __init__(self) -> None:
        self.archive = _Archive()
        self.statement_keys = {"test-key": KEY.public_key()}
        self.events: dict[tuple[str, str], ChainedEvent] = {}

    def find_event(self, tenant, event_type, name, value):
        return self.events.get((str(event_type), value))

    def event(self, tenant, event_type, event_id):
        return None

    def chained(self, event):
        return None

    def upload(self, tenant, document_id):
        return None

    def derived_by(self):
        raise AssertionError("not reached: the walk breaks before the signed copy")


def _signed(payload: object) -> bytes:
    return dsse.sign_envelope(json.dumps(payload).encode(), KEY, "test-key")


def _job_output(statement: object) -> _Source:
    """A job's published output whose statement (signed, recorded) carries ``statement``."""
    source = _Source()
    statement_key = f"documents/acme/redacted/job_1/{STATEMENT}"
    artifacts = [
        {"name": "redacted.pdf", "key": OUTPUT, "sha256": source.archive.put(OUTPUT, PDF)},
        {"name": STATEMENT, "key": statement_key, "sha256": source.archive.put(statement_key, _signed(statement))},
    ]
    parsed = {"subject_sha256": INPUT, "details": {"artifacts": artifacts}}
    source.events[(EventType.DOCUMENT_PUBLISHED, "job_1")] = _in_log(parsed)
    return source


def _statement(**changes: object) -> dict:
    """A statement about the job's input, the job's link as it expects, with ``changes``."""
    return {
        "_type": dsse.STATEMENT_TYPE,
        "subject": dsse.subject("document/doc_1", INPUT),
        "predicateType": PREDICATE_TYPE,
        "predicate": {"operation": "redact", "inputs": [{"document_id": "doc_1", "sha256": "ab"}]},
    } | changes


STATEMENTS = {
    "a list": [],
    "a string": "a statement",
    "two subjects": _statement(subject=_statement()["subject"] * 2),
    "a subject that is a string": _statement(subject=["document/doc_1"]),
    "a digest that is a string": _statement(subject=[{"name": "document/doc_1", "digest": "sha256"}]),
    "artifacts that are not a list": _statement(predicate={"operation": "redact", "inputs": [], "artifacts": 7}),
    "artifacts that are strings": _statement(predicate={"operation": "redact", "inputs": [], "artifacts": ["x"]}),
    "inputs that are a string": _statement(predicate={"operation": "redact", "inputs": "doc_1"}),
    "no inputs": _statement(predicate={"operation": "redact", "inputs": []}),
    "inputs that name no document": _statement(predicate={"operation": "redact", "inputs": [{"sha256": "ab"}]}),
}


@pytest.mark.parametrize("statement", STATEMENTS.values(), ids=STATEMENTS.keys())
def test_a_statement_of_another_shape_breaks_its_link(statement):
    report = lineage.walk(_job_output(statement), OUTPUT)
    assert (report["ok"], report["code"], report["link"]) == (
        False,
        ReasonCode.LINEAGE_STATEMENT_INVALID.value,
        f"job output {OUTPUT}",
    )


def test_a_statement_of_the_expected_shape_walks_on_to_the_input():
    """The same source with a well-formed statement: the job's link holds and the walk goes on to its input (so the
    shapes above are what breaks them)."""
    report = lineage.walk(_job_output(_statement()), OUTPUT)
    assert (report["code"], report["link"]) == (ReasonCode.LINEAGE_EVENT_INVALID.value, "upload doc_1")
    assert [link["link"] for link in report["links"]] == ["job_output"]


MANIFESTS = {
    "a list": lambda recorded: [],
    "a string": lambda recorded: "a manifest",
    "a statement that is a string": lambda recorded: {"lineage": recorded, "statement": "statement.dsse.json"},
}


@pytest.mark.parametrize("manifest_of", MANIFESTS.values(), ids=MANIFESTS.keys())
def test_a_derivatives_manifest_of_another_shape_breaks_its_link(manifest_of):
    source = _Source()
    digest = source.archive.put(DERIVATIVE, PDF)
    manifest_key = "documents/acme/derived/job_2/manifest.json"
    recorded = {"operation": "split", "output_digest": digest}
    details = {
        "lineage": recorded,
        "manifest": manifest_key,
        "manifest_sha256": source.archive.put(manifest_key, json.dumps(manifest_of(recorded)).encode()),
        "statement_sha256": "ab" * 32,
    }
    source.events[(EventType.DOCUMENT_DERIVED, DERIVATIVE)] = _in_log({"subject_sha256": digest, "details": details})
    report = lineage.walk(source, DERIVATIVE)
    assert (report["ok"], report["code"], report["link"]) == (
        False,
        ReasonCode.LINEAGE_STATEMENT_INVALID.value,
        f"split {DERIVATIVE}",
    )


def test_a_bundle_manifest_whose_ledger_position_is_not_an_object_fails_the_tlog_proof_check(tmp_path):
    """A downloaded bundle's tlog proof is checked against the event at the manifest's ledger seq: a manifest whose
    ledger position is a string holds no seq."""
    store, prefix = LocalStore(tmp_path), "bundles/acme/2026-01/b1"
    root = base64.b64encode(bytes(32)).decode()
    signature = base64.b64encode(bytes(68)).decode()
    proof = f"{HEADER}\nindex 0\n\nevidence.example/log\n1\n{root}\n\n\u2014 evidence.example/log {signature}\n"
    store.put_once(tlog_proof_path(prefix), proof.encode())
    store.put_once(f"{prefix}/manifest.json", json.dumps({"ledger": "seq 1"}).encode())
    check = check_bundle_log(store, prefix, key_ids=frozenset(), root_ids=frozenset(), origin=None, policy=None)
    assert check is not None and (check.passed, check.code) == (False, ReasonCode.LEDGER_EVENT_MISMATCH.value)


def test_assessment_results_whose_props_are_not_objects_are_not_bound_to_the_bundle():
    results = {"assessment-results": {"results": [{"observations": [{"props": ["tenant"], "relevant-evidence": []}]}]}}
    with pytest.raises(EvidenceError) as refused:
        oscal.check_bound(json.dumps(results).encode(), {"tenant": "acme"})
    assert refused.value.code == ReasonCode.ASSESSMENT_MISMATCH
