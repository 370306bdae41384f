"""ETSI TS 119 102-2 signature validation reports: what EU DSS and other signature validation services write, read by
auditors' own tools. pyHanko builds the report (``pyhanko.sign.validation.report``, "incubating", needs xsdata) from
its ETSI EN 319 102-1 validation of a PDF signature: the basic process at B-B, validation with time (LTVM) at B-T
and B-LT, long-term (LTA) validation at B-LTA, offline, against the same roots `evidence verify` pins and at the same
moment. The report's main indication (TOTAL-PASSED, INDETERMINATE, TOTAL-FAILED) and sub-indication are pyHanko's
verdict on the signature; `evidence verify`'s own `pdf_signature` check adds what the process does not judge (the
signature's field, what may follow it), so a bundle's verdict and its report can differ only there.
"""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from pyhanko.generated.etsi import ts_11910202
from pyhanko.pdf_utils.misc import PdfError
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign.validation import EmbeddedPdfSignature
from pyhanko.sign.validation.ades import (
    AdESBasicValidationResult,
    ades_basic_validation,
    ades_lta_validation,
    ades_with_time_validation,
)
from pyhanko.sign.validation.policy_decl import (
    PdfSignatureValidationSpec,
    RevinfoOnlineFetchingRule,
    RevocationInfoGatheringSpec,
    SignatureValidationSpec,
)
from pyhanko.sign.validation.report.tools import NAMESPACES, generate_report
from pyhanko.sign.validation.status import PdfSignatureStatus
from pyhanko_certvalidator.context import CertValidationPolicySpec
from pyhanko_certvalidator.ltv.types import ValidationTimingInfo
from pyhanko_certvalidator.policy_decl import LEGACY_POLICY_MAP, CertRevTrustPolicy
from pyhanko_certvalidator.registry import SimpleTrustManager
from xsdata.formats.dataclass.parsers import XmlParser
from xsdata.formats.dataclass.serializers import XmlSerializer
from xsdata.formats.dataclass.serializers.config import SerializerConfig

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.signing.pades import TIMESTAMPED, der_certificate, long_term_spec

MAIN_INDICATION = re.compile(r"<vr:MainIndication>urn:etsi:019102:mainindication:([a-z-]+)</vr:MainIndication>")
_SOFT_FAIL = CertRevTrustPolicy(LEGACY_POLICY_MAP["soft-fail"])  # as `evidence verify` checks B-B to B-LT


@dataclass(frozen=True)
class ValidationReport:
    field_name: str
    indication: str  # total-passed, indeterminate or total-failed, as the report states it
    xml: bytes


def validation_reports(
    pdf: bytes, roots_pem: Sequence[bytes], level: str, at: datetime | None = None
) -> list[ValidationReport]:
    """One report per signature of the PDF that pyHanko can validate at all, in file order (document time stamps
    are reported inside the LTA process, not apart), against the trust roots ``roots_pem`` (signers' and time
    stamp authorities'); PDF_SIGNATURE_INVALID when the file does not parse as a signed PDF. Given ``at``, the
    bytes are deterministic: the same PDF, roots and moment give the same report."""
    roots = [der_certificate(pem) for pem in roots_pem]
    try:
        signatures = [
            s
            for s in PdfFileReader(io.BytesIO(pdf), strict=True).embedded_signatures
            if s.sig_object_type != "/DocTimeStamp"
        ]
    except (PdfError, ValueError, KeyError) as error:
        raise EvidenceError(
            ReasonCode.PDF_SIGNATURE_INVALID,
            f"signed PDF does not parse or holds no signature ({type(error).__name__})",
        ) from None
    timing = ValidationTimingInfo(at, at, True) if at else ValidationTimingInfo.now()
    reports = []
    for signature in signatures:
        try:
            result = asyncio.run(_validate(signature, roots, level, timing))
        except (ValueError, PdfError):  # a signature pyHanko cannot validate at all (a disallowed algorithm, say)
            continue
        xml = _schema_valid(generate_report(signature, result))
        found = MAIN_INDICATION.search(xml.decode())
        reports.append(ValidationReport(signature.field_name, found.group(1) if found else "", xml))
    return reports


async def _validate(
    signature: EmbeddedPdfSignature, roots: list[Any], level: str, timing: ValidationTimingInfo
) -> AdESBasicValidationResult[Any]:
    if level == "B-LTA":
        return await ades_lta_validation(
            signature, PdfSignatureValidationSpec(long_term_spec(roots)), timing_info=timing
        )
    trust = SimpleTrustManager.build(trust_roots=roots)
    spec = SignatureValidationSpec(
        cert_validation_policy=CertValidationPolicySpec(trust, _SOFT_FAIL),
        # the time stamp's certificate as the signer's: at B-T no revocation data of the TSA is in the file, and
        # requiring it made a signature `evidence verify` accepts indeterminate
        ts_cert_validation_policy=CertValidationPolicySpec(trust, _SOFT_FAIL),
        revinfo_gathering_policy=RevocationInfoGatheringSpec(RevinfoOnlineFetchingRule.LOCAL_ONLY),
    )
    if level not in TIMESTAMPED:  # pyHanko 0.38's basic process reports in its CMS status class, whatever asked
        return await ades_basic_validation(
            signature.signed_data, spec, timing_info=timing, raw_digest=signature.compute_digest()
        )
    signature.compute_integrity_info()  # coverage and modifications, which the PDF status carries
    return await ades_with_time_validation(
        signature.signed_data,
        spec,
        timing_info=timing,
        raw_digest=signature.compute_digest(),
        status_cls=PdfSignatureStatus,
        extra_status_kwargs=signature.summarise_integrity_info(),
    )


def _schema_valid(xml: str) -> bytes:
    """The report made valid against the standard's schema where pyHanko 0.38's is not: the schema requires a
    best signature time, which pyHanko leaves out after the basic process (that process has no proof of existence
    before the validation time, EN 319 102-1 5.3, so that time is the best signature time, as a proof the
    validation gives); and a list of validation objects holds at least one (pyHanko writes an empty one when the
    signature failed before any object was validated)."""
    report = XmlParser().from_string(xml, ts_11910202.ValidationReport)
    (single,) = report.signature_validation_report
    times = single.validation_time_info
    if times is not None and times.best_signature_time is None:
        best = ts_11910202.POEType(poetime=times.validation_time, type_of_proof="urn:etsi:019102:poetype:validation")
        single = replace(single, validation_time_info=replace(times, best_signature_time=best))
    objects = report.signature_validation_objects
    if objects is not None and not objects.validation_object:
        objects = None
    valid = replace(report, signature_validation_report=(single,), signature_validation_objects=objects)
    if valid == report:
        return xml.encode()
    return XmlSerializer(config=SerializerConfig(indent="  ")).render(valid, ns_map=NAMESPACES).encode()
