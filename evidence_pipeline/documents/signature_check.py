"""The signature check: every embedded signature of an uploaded PDF, validated with pyHanko under a trust policy.

A check answers "does each signature validate under this policy at this time", separately for each thing that can
go wrong: integrity (the signed bytes' digest), the cryptographic signature, coverage (the whole file, or which
revision of how many), the trust chain to the policy's roots, the signing time the signer claims, and what changed
after signing (pyHanko's difference analysis: a ModificationLevel). It is never folded into one ``verified`` flag:
the record lists each signature's findings, and the outcome only says whether any signature has one.

The trust policy is versioned like a ruleset: its version is the sha256 of its canonical form, which names the
trusted roots by their certificate digests and the modifications after signing that are accepted. Its roots are
the service's own signing root and the certificates in ``EVIDENCE_SIGNATURE_TRUST_ROOTS`` (a PEM file).

A check is identified by (tenant, document digest, policy version): the same bytes under the same policy have one
check, recorded once, whatever job asks for it again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import BinaryIO

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from pyhanko.pdf_utils.generic import IndirectObject
from pyhanko.pdf_utils.misc import PdfError
from pyhanko.sign import fields
from pyhanko.sign.diff_analysis import ModificationLevel
from pyhanko.sign.validation import SignatureCoverageLevel, validate_pdf_signature, validate_pdf_timestamp
from pyhanko_certvalidator import ValidationContext

from evidence_pipeline.canonical import sha256_text
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.signing.dsse import canonical_json
from evidence_pipeline.signing.pades import der_certificate
from evidence_pipeline.signing.pdf_reader import Reader, open_pdf

RECORD_SCHEMA = "evidence-signature-check/v1"
POLICY_NAME = "signature-check/2026.1"
# What may change after a signature without it being a finding: document time stamps and validation material, and
# filling in form fields (including later signatures), as PAdES and DocMDP level 2 allow.
ACCEPTED_MODIFICATIONS = (ModificationLevel.NONE, ModificationLevel.LTA_UPDATES, ModificationLevel.FORM_FILLING)
MAX_SIGNATURES = 50


@dataclass(frozen=True)
class TrustPolicy:
    roots: tuple[bytes, ...]  # PEM certificates, each trusted as a root

    @property
    def document(self) -> dict:
        return {
            "policy": POLICY_NAME,
            "trust_roots_sha256": sorted(hashlib.sha256(der_certificate(pem).dump()).hexdigest() for pem in self.roots),
            "accepted_modifications": [level.name.lower() for level in ACCEPTED_MODIFICATIONS],
            "revocation": "soft-fail, offline",
        }

    @property
    def version(self) -> str:
        return f"{POLICY_NAME}@{hashlib.sha256(canonical_json(self.document)).hexdigest()[:16]}"


def trust_policy(service_root_pem: bytes, extra_roots_pem: bytes | None) -> TrustPolicy:
    """The policy of the service's own root plus every certificate of ``extra_roots_pem``; CONFIG_INVALID when
    that file holds no certificate or one that does not load."""
    roots = [service_root_pem]
    if extra_roots_pem is not None:
        try:
            loaded = x509.load_pem_x509_certificates(extra_roots_pem)
        except ValueError:
            raise EvidenceError(
                ReasonCode.CONFIG_INVALID, "EVIDENCE_SIGNATURE_TRUST_ROOTS holds no loadable PEM certificate"
            ) from None
        roots += [cert.public_bytes(serialization.Encoding.PEM) for cert in loaded]
    return TrustPolicy(tuple(dict.fromkeys(roots)))


def check_id(tenant: str, sha256: str, policy: TrustPolicy) -> str:
    """The signature check of these bytes under this policy: one id, whichever job asks."""
    return "sgc_" + sha256_text(f"{tenant}/{sha256}/{policy.version}")[:40]


def check_signatures(
    file: BinaryIO, document_sha256: str, policy: TrustPolicy, check: str, at: datetime | None = None
) -> dict:
    """The signature check record of a gated PDF (canonical JSON-able): one entry per embedded signature, in file
    order, and the outcome: ``unsigned``, ``no_findings``, or ``findings`` (some signature has one)."""
    at = at or datetime.now(timezone.utc).replace(microsecond=0)
    context = ValidationContext(
        trust_roots=[der_certificate(pem) for pem in policy.roots],
        allow_fetching=False,
        revocation_mode="soft-fail",
        moment=at,
    )
    try:
        reader = open_pdf(file)
        embedded = reader.embedded_signatures
        if len(embedded) > MAX_SIGNATURES:
            raise EvidenceError(ReasonCode.DOCUMENT_LIMIT_EXCEEDED, f"more than {MAX_SIGNATURES} signatures")
        revisions = reader.xrefs.total_revisions
        pages = _field_pages(reader)
        signatures = [_one(signature, context, revisions, pages, reader.lenient_xref) for signature in embedded]
    except (PdfError, ValueError, KeyError, TypeError, AttributeError, IndexError) as error:
        raise EvidenceError(
            ReasonCode.DOCUMENT_MALFORMED, f"the signatures cannot be read ({type(error).__name__})"
        ) from None
    outcome = "unsigned" if not signatures else "findings" if any(s["findings"] for s in signatures) else "no_findings"
    return {
        "schema": RECORD_SCHEMA,
        "signature_check_id": check,
        "policy_version": policy.version,
        "policy": policy.document,
        "document_sha256": document_sha256,
        "validated_at": at.isoformat(),
        "revisions": revisions,
        "outcome": outcome,
        "signatures": signatures,
    }


def _one(signature, context: ValidationContext, revisions: int, pages: dict, lenient_xref: bool) -> dict:
    stamp = signature.sig_object_type == "/DocTimeStamp"  # a document time stamp (PAdES B-LTA), not a signature
    where = {
        "field": signature.field_name,
        "kind": "document_timestamp" if stamp else "signature",
        "page": pages.get(signature.field_name),
        "signed_revision": signature.signed_revision + 1,
    }  # 1-based, of `revisions`
    try:
        status = validate_pdf_timestamp(signature, context) if stamp else validate_pdf_signature(signature, context)
    except (ValueError, PdfError) as error:  # pyHanko's validation errors are ValueErrors: a finding, not a crash
        return where | {"unreadable": type(error).__name__, "findings": ["signature_unreadable"]}
    level = status.modification_level
    coverage = status.coverage
    findings = []
    if not status.intact:
        findings.append("digest_mismatch")  # the signed bytes changed
    if not status.valid:
        findings.append("signature_invalid")
    if coverage != SignatureCoverageLevel.ENTIRE_FILE and coverage != SignatureCoverageLevel.ENTIRE_REVISION:
        findings.append("coverage_unclear")
    if level is None or level not in ACCEPTED_MODIFICATIONS:
        findings.append("modified_after_signing")
    elif lenient_xref and coverage != SignatureCoverageLevel.ENTIRE_FILE:
        # what changed after signing was judged over cross-reference sections that break pyHanko's strict rules,
        # which its difference analysis relies on
        findings.append("cross_reference_lenient")
    if status.docmdp_ok is False or (status.docmdp_ok is None and not stamp):  # a time stamp has no DocMDP to keep
        findings.append("docmdp_violated")
    # Trust is judged only on intact bytes: pyHanko reports a broken digest as untrusted too, which is not a fact
    # about the signer's certificate.
    trusted = status.trusted if status.intact else None
    if trusted is False:
        findings.append("untrusted")
    cert = x509.load_der_x509_certificate(status.signing_cert.dump())
    claimed = None if stamp else status.signer_reported_dt or signature.self_reported_timestamp
    # a document time stamp's own time; a signature's from its signature time stamp, if any
    stamped = (
        status.timestamp
        if stamp
        else (
            status.timestamp_validity.timestamp
            if status.timestamp_validity is not None and status.timestamp_validity.trusted
            else None
        )
    )
    return (
        where
        | {
            "coverage": coverage.name.lower(),  # entire_file, entire_revision, contiguous_block_from_start, unclear
            "covers_whole_document": coverage == SignatureCoverageLevel.ENTIRE_FILE,
            "intact": status.intact,
            "signature_valid": status.valid,
            "trusted": trusted,  # None: not evaluated (integrity failed)
            "trust_problem": "not_evaluated" if trusted is None else None if trusted else _trust_problem(status),
            "signing_time_claimed": claimed.astimezone(timezone.utc).isoformat() if claimed else None,
            "signing_time_stamped": stamped.astimezone(timezone.utc).isoformat() if stamped else None,
            "modifications_after_signing": level.name.lower() if level is not None else "unknown",
            "signer": {
                "subject": cert.subject.rfc4514_string()[:300],
                "certificate_sha256": hashlib.sha256(status.signing_cert.dump()).hexdigest(),
            },
            "findings": findings,
        }
    )


def _trust_problem(status) -> str:
    indication = status.trust_problem_indic
    return indication.name.lower() if indication is not None else "no_path_to_a_trusted_root"


def _field_pages(reader: Reader) -> dict[str, int]:
    """Each signature field's name -> the 1-based page whose annotations hold its widget (None: no widget)."""
    widgets: dict[int, str] = {}  # object number of a field or of one of its widgets -> the field's name
    for name, _, field_ref in fields.enumerate_sig_fields(reader, filled_status=True):
        widgets[field_ref.idnum] = name
        for kid in _array(field_ref.get_object(), "/Kids"):
            if isinstance(kid, IndirectObject):
                widgets[kid.idnum] = name
    pages: dict[str, int] = {}
    for number, page in enumerate(_walk_pages(reader.root["/Pages"]), start=1):
        for annotation in _array(page, "/Annots"):
            if isinstance(annotation, IndirectObject) and annotation.idnum in widgets:
                pages.setdefault(widgets[annotation.idnum], number)
    return pages


def _walk_pages(node):
    """The page dictionaries of a page tree, in order (the gate already refused loops)."""
    stack = [node]
    while stack:
        node = stack.pop().get_object()
        if node.get("/Type") == "/Page":
            yield node
        else:
            stack.extend(reversed(list(_array(node, "/Kids"))))


def _array(dictionary, key: str):
    """An array entry, which the PDF may give as an indirect reference (``get`` would not follow it)."""
    value = dictionary.get(key)
    return value.get_object() if value is not None else ()
