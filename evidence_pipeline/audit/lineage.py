"""The walk from a document artifact back to the uploaded bytes, checking every link: one implementation, which
`evidence lineage` runs over the ledger and the stores (lineage_ledger.py) and `evidence verify --package`
over an audit package (package_documents.py), with no database and no network.

An artifact id is an archive key, as a job's status lists its outputs. The walk follows what each link records:

- a derivative (a split's part, a merge): its `document.derived` event, its bytes (the event's output digest), its
  manifest and its DSSE statement (both must carry the event's lineage); then, for a merge, each parent's approving
  review (the review job's `document.published` event, its decision.json and statement: approved, about exactly
  that parent's bytes) or reviewer's decision (its `part.decided` event: approved, about exactly that parent's
  bytes, by the actor the merge pinned, as its stored signed request says); for a split, its signature check (the
  `signature.checked` event, the record and its statement, about the original's digest); then each parent in turn;
- any other job output (a redaction, a review decision, an approval): the job's `document.published` event, the
  output's bytes and the job's statement, then the job's inputs;
- an upload: its `document.admitted` event and, where the source holds them, its bytes.

Every event met is checked by the source (``Source.chained``): against the hash chain in the ledger, by its
inclusion proof in a package. The first link that does not hold ends the walk with a reason code and names the
link; ok only when every link holds.

Over 400 lines because every link kind the walk checks is one rule of one walk; split per link, the
order of the checks would be spread over files."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline import jsonread
from evidence_pipeline.document_formats import (
    DECISION,
    DERIVATIVE_PREDICATE_TYPE,
    DERIVED_BY,
    DERIVED_BY_FIELD,
    PREDICATE_TYPE,
    SIGNATURE_CHECK_PREDICATE_TYPE,
    SIGNATURE_CHECKS,
    STATEMENT,
    decision_problem,
)
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import TENANT_ID, ChainedEvent, EventType
from evidence_pipeline.signing import dsse
from evidence_pipeline.signing.pades import TIMESTAMPED, verify_pdf_signature
from evidence_pipeline.store import ArtifactStore, sha256_hex


@dataclass(frozen=True)
class DerivedBy:
    """What the service's "derived by" PAdES signatures are checked against."""

    root_pem: bytes
    level: str
    tsa_root_pem: bytes | None


class Archive(Protocol):
    """What the walk reads of an archive (an ArtifactStore, or export_documents.py's recording of one)."""

    def get(self, key: str) -> bytes: ...

    def exists(self, key: str) -> bool: ...


class Source(Protocol):
    """Where the walk reads: events with their place in the log (models.ChainedEvent)."""

    @property
    def archive(self) -> Archive: ...

    statement_keys: dict[str, ed25519.Ed25519PublicKey]

    def find_event(self, tenant: str, event_type: str, name: str, value: str) -> ChainedEvent | None:
        """The oldest of ``tenant``'s events of ``event_type`` whose details[``name``] is ``value``."""

    def event(self, tenant: str, event_type: str, event_id: str) -> ChainedEvent | None: ...

    def chained(self, event: ChainedEvent) -> str | None:
        """What is wrong with the event's place in the log, or None."""

    def upload(self, tenant: str, document_id: str) -> tuple[ArtifactStore, str] | None:
        """(store, key) of an upload's bytes, or None where the source holds its digest only."""

    def derived_by(self) -> DerivedBy: ...


class _Broken(Exception):
    def __init__(self, code: ReasonCode, link: str, message: str):
        super().__init__(message)
        self.code, self.link, self.message = code.value, link, message


def walk(source: Source, artifact_id: str) -> dict[str, Any]:
    """The walk's report: ``ok``, and on failure ``code``, ``link`` and ``message``; ``links`` lists every link
    checked, from the artifact back to the upload."""
    walker = _Walker(source, artifact_id)
    try:
        walker.artifact(artifact_id)
    except _Broken as broken:
        return walker.report(broken.code, broken.link, broken.message)
    except EvidenceError as error:
        if error.code != ReasonCode.LEDGER_INVALID:
            raise
        return walker.report(ReasonCode.LINEAGE_EVENT_INVALID.value, "ledger", "an audit event body is not an event")
    return walker.report()


class _Walker:
    def __init__(self, source: Source, artifact_id: str):
        self.source, self.artifact_id = source, artifact_id
        self.links: list[dict[str, Any]] = []
        parts = artifact_id.split("/") if isinstance(artifact_id, str) else []
        if len(parts) < 4 or parts[0] != "documents" or not TENANT_ID.fullmatch(parts[1]):
            raise EvidenceError(ReasonCode.LINEAGE_NOT_FOUND, "an artifact id is documents/<tenant>/…")
        self.tenant = parts[1]
        self.archive = source.archive

    def report(self, code: str | None = None, link: str | None = None, message: str | None = None) -> dict[str, Any]:
        return {
            "artifact_id": self.artifact_id,
            "ok": code is None,
            "code": code,
            "link": link,
            "message": message,
            "links": self.links,
        }

    # --- the kinds of link -----------------------------------------------------------------------------------

    def artifact(self, artifact_id: str) -> tuple[str, str]:
        """Check an artifact and everything it came from; returns its sha256 and the original upload's."""
        signed_copy = artifact_id.endswith(f".{DERIVED_BY}")  # walked as the derivative it is a signed copy of
        if signed_copy:
            artifact_id = artifact_id.removesuffix(f".{DERIVED_BY}") + ".pdf"
        derived = self.source.find_event(self.tenant, EventType.DOCUMENT_DERIVED, "artifact_id", artifact_id)
        if derived is not None:
            return self.derivative(artifact_id, derived)
        segments = artifact_id.split("/")
        if len(segments) == 5 and segments[2] not in ("derived", SIGNATURE_CHECKS):
            return self.job_output(artifact_id, segments[3])
        if not self.links and not self.archive.exists(artifact_id):
            raise EvidenceError(ReasonCode.LINEAGE_NOT_FOUND, "no committed artifact has this id")
        raise _Broken(
            ReasonCode.LINEAGE_EVENT_INVALID,
            f"derivative {artifact_id}",
            "no document.derived event names this artifact",
        )

    def parent(self, parent: str) -> tuple[str, str]:
        """(sha256, original sha256) of a checked parent: an upload is its own original."""
        if parent.startswith("doc_"):
            digest = self.upload(parent)
            return digest, digest
        return self.artifact(parent)

    def derivative(self, artifact_id: str, event: ChainedEvent) -> tuple[str, str]:
        details = event.parsed["details"]
        recorded = details["lineage"]
        link = f"{recorded['operation']} {artifact_id}"
        self.chained(event, link)
        digest = recorded["output_digest"]
        if event.parsed["subject_sha256"] != digest:
            raise _Broken(ReasonCode.LINEAGE_EVENT_INVALID, link, "the event's subject is not the output digest")
        data = self.bytes_of(self.archive, artifact_id, digest, link)
        manifest = self.json_of(details["manifest"], sha256=details["manifest_sha256"], link=link, what="manifest")
        if (
            manifest.get("lineage") != recorded
            or jsonread.at(manifest, "statement", "sha256") != details["statement_sha256"]
        ):
            raise _Broken(ReasonCode.LINEAGE_STATEMENT_INVALID, link, "the manifest does not carry the event's lineage")
        predicate = self.statement(
            details["statement"],
            sha256=details["statement_sha256"],
            name=artifact_id,
            subject_digest=digest,
            predicate_type=DERIVATIVE_PREDICATE_TYPE,
            link=link,
        )
        if predicate.get("lineage") != recorded:
            raise _Broken(ReasonCode.LINEAGE_STATEMENT_INVALID, link, "the statement does not carry the lineage")
        self.derived_by(details, data, link)
        self.links.append({"link": "derivative", "artifact_id": artifact_id, "sha256": digest, "lineage": recorded})
        reviews = {review["artifact_id"]: review for review in recorded.get("reviews", [])}
        if recorded["operation"] == "merge" and set(reviews) != set(recorded["parent_artifact_ids"]):
            raise _Broken(ReasonCode.LINEAGE_NOT_APPROVED, link, "a parent of the merge has no approving review")
        if recorded["signature_check_id"] and recorded["operation"] == "split":
            self.signature_check(recorded["signature_check_id"], recorded["original_digest"])
        for parent in recorded["parent_artifact_ids"]:
            parent_digest, origin = self.parent(parent)
            if parent in reviews:
                approval = self.decision if "decision_event_id" in reviews[parent] else self.review
                approval(reviews[parent], parent, parent_digest)
            if origin != recorded["original_digest"]:
                raise _Broken(ReasonCode.LINEAGE_EVENT_INVALID, link, f"parent {parent} is not of the original")
        return digest, recorded["original_digest"]

    def derived_by(self, details: dict[str, Any], data: bytes, link: str) -> None:
        """The derivative's copy signed by the service: the recorded bytes, beginning with the derivative's, and
        our valid PAdES signature after them."""
        signed = self.bytes_of(self.archive, details["derived_by"], details["derived_by_sha256"], link)
        if not signed.startswith(data):
            raise _Broken(ReasonCode.LINEAGE_DIGEST_MISMATCH, link, "the signed copy is not of the derivative")
        try:
            by = self.source.derived_by()
            verify_pdf_signature(
                signed,
                by.root_pem,
                level=by.level,
                tsa_root_pem=by.tsa_root_pem if by.level in TIMESTAMPED else None,
                field_name=DERIVED_BY_FIELD,
            )
        except EvidenceError as error:
            raise _Broken(
                ReasonCode.LINEAGE_STATEMENT_INVALID, link, f"the derived-by signature does not verify ({error.code})"
            ) from None

    def review(self, review: dict[str, Any], parent: str, parent_digest: str) -> None:
        link = f"review {review['review_job_id']} of {parent}"
        event = self.published(review["review_job_id"], link)
        decision = [a for a in event["details"]["artifacts"] if a["name"] == DECISION]
        if [a["sha256"] for a in decision] != [review["decision_sha256"]]:
            raise _Broken(ReasonCode.LINEAGE_EVENT_INVALID, link, "the review's event names another decision")
        body = self.json_of(
            decision[0]["key"],
            sha256=decision[0]["sha256"],
            link=link,
            what="decision",
            code=ReasonCode.LINEAGE_DIGEST_MISMATCH,
        )
        if jsonread.at(body, "input", "sha256") != parent_digest or jsonread.at(body, "input", "document_id") != parent:
            raise _Broken(ReasonCode.LINEAGE_EVENT_INVALID, link, "the decision is about other bytes")
        if body.get("decision") != "approved":
            raise _Broken(ReasonCode.LINEAGE_NOT_APPROVED, link, "the review decision is not approved")
        self.job_statement(event, parent_digest, link)
        self.links.append(
            {
                "link": "review",
                "job_id": review["review_job_id"],
                "artifact_id": parent,
                "decision": "approved",
                "decision_sha256": review["decision_sha256"],
            }
        )

    def decision(self, pin: dict[str, Any], parent: str, parent_digest: str) -> None:
        link = f"decision {pin['decision_event_id']} on {parent}"
        event = self.in_log(
            self.source.event(self.tenant, EventType.PART_DECIDED, pin["decision_event_id"]),
            link,
            "no part.decided event",
        )
        body = event.parsed
        if body["details"].get("decision") != "approved":
            raise _Broken(ReasonCode.LINEAGE_NOT_APPROVED, link, "the reviewer's decision is not approved")
        problem = decision_problem(body, pin, parent_digest)
        if problem is not None:
            raise _Broken(ReasonCode.LINEAGE_EVENT_INVALID, link, f"the reviewer's decision: {problem}")
        self.links.append(
            {
                "link": "decision",
                "event_id": body["event_id"],
                "artifact_id": parent,
                "decision": "approved",
                "decided_by": body["actor"],
                "reason": body["details"]["reason"],
            }
        )

    def signature_check(self, check: str, original_digest: str) -> None:
        link = f"signature check {check}"
        event = self.in_log(
            self.source.find_event(self.tenant, EventType.SIGNATURE_CHECKED, "signature_check_id", check),
            link,
            "no signature.checked event",
        )
        details = event.parsed["details"]
        if event.parsed["subject_sha256"] != original_digest:
            raise _Broken(ReasonCode.LINEAGE_EVENT_INVALID, link, "the check is about other bytes")
        record = self.json_of(
            details["record"],
            sha256=details["record_sha256"],
            link=link,
            what="record",
            code=ReasonCode.LINEAGE_DIGEST_MISMATCH,
        )
        if (record.get("signature_check_id"), record.get("document_sha256"), record.get("policy_version")) != (
            check,
            original_digest,
            details["policy_version"],
        ):
            raise _Broken(ReasonCode.LINEAGE_EVENT_INVALID, link, "the record is not the event's check")
        predicate = self.statement(
            details["statement"],
            sha256=details["statement_sha256"],
            name=f"document/{details['document_id']}",
            subject_digest=original_digest,
            predicate_type=SIGNATURE_CHECK_PREDICATE_TYPE,
            link=link,
        )
        if predicate.get("record_sha256") != details["record_sha256"]:
            raise _Broken(ReasonCode.LINEAGE_STATEMENT_INVALID, link, "the statement names another record")
        reports = details.get("etsi_reports", [])  # each signature's ETSI report, recorded since issue 51
        if predicate.get("etsi_reports", []) != [{k: r[k] for k in ("key", "sha256", "indication")} for r in reports]:
            raise _Broken(ReasonCode.LINEAGE_STATEMENT_INVALID, link, "the statement names other ETSI reports")
        for report in reports:
            self.bytes_of(self.archive, report["key"], report["sha256"], link)
        self.links.append(
            {
                "link": "signature_check",
                "signature_check_id": check,
                "policy_version": details["policy_version"],
                "outcome": record.get("outcome"),
                "signatures": details["signatures"],
            }
        )

    def job_output(self, artifact_id: str, job_id: str) -> tuple[str, str]:
        link = f"job output {artifact_id}"
        event = self.published(job_id, link)
        [entry] = [a for a in event["details"]["artifacts"] if a["key"] == artifact_id] or [None]
        if entry is None:
            raise _Broken(ReasonCode.LINEAGE_EVENT_INVALID, link, "the job's event does not name this output")
        self.bytes_of(self.archive, artifact_id, entry["sha256"], link)
        predicate = self.job_statement(event, None, link)
        self.links.append(
            {
                "link": "job_output",
                "artifact_id": artifact_id,
                "sha256": entry["sha256"],
                "job_id": job_id,
                "operation": predicate.get("operation"),
            }
        )
        inputs = predicate.get("inputs")
        if (
            not isinstance(inputs, list)
            or not inputs
            or not all(isinstance(jsonread.at(i, "document_id"), str) for i in inputs)
        ):
            raise _Broken(ReasonCode.LINEAGE_STATEMENT_INVALID, link, "the statement names no input documents")
        origins = []
        for source in inputs:
            digest, origin = self.parent(source["document_id"])
            if digest != source["sha256"]:
                raise _Broken(ReasonCode.LINEAGE_DIGEST_MISMATCH, link, "an input is not the bytes the job used")
            origins.append(origin)
        return entry["sha256"], origins[0]

    def upload(self, document_id: str) -> str:
        link = f"upload {document_id}"
        event = self.in_log(
            self.source.find_event(self.tenant, EventType.DOCUMENT_ADMITTED, "document_id", document_id),
            link,
            "no document.admitted event for the upload",
        )
        digest: str = event.parsed["subject_sha256"]
        stored = self.source.upload(self.tenant, document_id)
        if stored is not None:
            self.bytes_of(*stored, digest, link)
        self.links.append(
            {"link": "upload", "document_id": document_id, "sha256": digest, "bytes_checked": stored is not None}
        )
        return digest

    # --- checks --------------------------------------------------------------------------------------------

    def published(self, job_id: str, link: str) -> dict[str, Any]:
        event = self.in_log(
            self.source.find_event(self.tenant, EventType.DOCUMENT_PUBLISHED, "job_id", job_id),
            link,
            "no document.published event for the job",
        )
        return event.parsed

    def job_statement(self, event: dict[str, Any], subject_digest: str | None, link: str) -> dict[str, Any]:
        """The predicate of a job's statement, which must list the event's artifacts with their digests."""
        details = event["details"]
        [entry] = [a for a in details["artifacts"] if a["name"] == STATEMENT] or [None]
        if entry is None:
            raise _Broken(ReasonCode.LINEAGE_EVENT_INVALID, link, "the job's event names no statement")
        predicate = self.statement(
            entry["key"],
            sha256=entry["sha256"],
            name=None,
            subject_digest=subject_digest or event["subject_sha256"],
            predicate_type=PREDICATE_TYPE,
            link=link,
        )
        artifacts = predicate.get("artifacts", [])
        if not isinstance(artifacts, list):
            raise _Broken(ReasonCode.LINEAGE_STATEMENT_INVALID, link, "the statement's artifacts are not a list")
        listed = {jsonread.at(a, "name"): jsonread.at(a, "sha256") for a in artifacts}
        if any(listed.get(a["name"], a["sha256"]) != a["sha256"] for a in details["artifacts"]):
            raise _Broken(ReasonCode.LINEAGE_STATEMENT_INVALID, link, "the statement lists other outputs")
        return predicate

    def statement(
        self, key: str, *, sha256: str, name: str | None, subject_digest: str, predicate_type: str, link: str
    ) -> dict[str, Any]:
        data = self.get(self.archive, key, link, ReasonCode.LINEAGE_STATEMENT_INVALID)
        try:
            opened = dsse.verify_envelope(data, self.source.statement_keys, dsse.PAYLOAD_TYPE)
            body: Any = jsonread.loads(opened.payload, ReasonCode.LINEAGE_STATEMENT_INVALID, "the statement")
        except EvidenceError:
            raise _Broken(
                ReasonCode.LINEAGE_STATEMENT_INVALID, link, "the statement's signature does not verify"
            ) from None
        subjects = jsonread.at(body, "subject")
        subject = subjects[0] if isinstance(subjects, list) and len(subjects) == 1 else None
        if (
            sha256_hex(data) != sha256
            or not isinstance(body, dict)
            or body.get("predicateType") != predicate_type
            or jsonread.at(subject, "digest") != {"sha256": subject_digest}
            or (name is not None and jsonread.at(subject, "name") != name)
            or not isinstance(body.get("predicate"), dict)
        ):
            raise _Broken(ReasonCode.LINEAGE_STATEMENT_INVALID, link, "the statement is not about this link")
        predicate: dict[str, Any] = body["predicate"]
        return predicate

    def json_of(
        self, key: str, *, sha256: str, link: str, what: str, code: ReasonCode = ReasonCode.LINEAGE_STATEMENT_INVALID
    ) -> dict[str, Any]:
        """The JSON object at ``key`` (what is in it is the caller's to check, through ``_at``)."""
        data = self.get(self.archive, key, link, code)
        if sha256_hex(data) != sha256:
            raise _Broken(code, link, f"the {what} is not the one its event recorded")
        try:  # its digest is the one its event recorded: only the reading is bounded, not the size
            document = jsonread.loads(data, code, f"the {what}", max_bytes=len(data))
        except EvidenceError as error:
            raise _Broken(code, link, error.message) from None
        if not isinstance(document, dict):
            raise _Broken(code, link, f"the {what} is not a JSON object")
        return document

    def bytes_of(self, store: Archive, key: str, sha256: str, link: str) -> bytes:
        data = self.get(store, key, link, ReasonCode.LINEAGE_DIGEST_MISMATCH)
        if sha256_hex(data) != sha256:
            raise _Broken(ReasonCode.LINEAGE_DIGEST_MISMATCH, link, "the bytes are not the ones its event recorded")
        return data

    def get(self, store: Archive, key: str, link: str, code: ReasonCode) -> bytes:
        try:
            return store.get(key)
        except EvidenceError as error:
            if error.retryable:
                raise
            raise _Broken(code, link, f"cannot read it ({error.code})") from None

    def in_log(self, event: ChainedEvent | None, link: str, missing: str) -> ChainedEvent:
        """The event, once the source has placed it in the log; the link breaks when there is none."""
        if event is None:
            raise _Broken(ReasonCode.LINEAGE_EVENT_INVALID, link, missing)
        self.chained(event, link)
        return event

    def chained(self, event: ChainedEvent, link: str) -> None:
        problem = self.source.chained(event)
        if problem is not None:
            raise _Broken(ReasonCode.LINEAGE_EVENT_INVALID, link, problem)
