"""PAdES signatures with pyHanko, at the baseline levels B-B, B-T, B-LT and B-LTA.

Signing appends an incremental update, so the signed file starts with the exact unsigned bytes: a bundle can be
tied back to its deterministic unsigned report by hashing that prefix. Signatures themselves are not
deterministic (random /ID, signing time), which is why bundles are identified by the unsigned digest.

B-T adds an RFC 3161 signature time stamp. B-LT also embeds, in the document security store (DSS), the
certificates and the revocation information (CRLs, OCSP responses) that validate the signer and the time stamp,
fetched while signing. B-LTA then adds a document time stamp over all of it, so the signature can still be
validated after the signer's certificate has expired, for as long as the time stamp authority's certificate is
valid (ETSI EN 319 102-1 long-term validation).

Over 400 lines because the four baseline levels build on each other's signing setup and validation context."""

from __future__ import annotations

import asyncio
import io
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Any, BinaryIO

from asn1crypto import cms
from asn1crypto import x509 as asn1_x509
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.pdf_utils.misc import PdfError
from pyhanko.sign import fields, signers, timestamps
from pyhanko.sign.ades.report import AdESPassed
from pyhanko.sign.diff_analysis import ModificationLevel
from pyhanko.sign.general import SigningError
from pyhanko.sign.signers.pdf_signer import DSSContentSettings, TimestampDSSContentSettings
from pyhanko.sign.timestamps.common_utils import TimestampRequestError
from pyhanko.sign.validation import (
    DocumentSecurityStore,
    EmbeddedPdfSignature,
    SignatureCoverageLevel,
    validate_pdf_signature,
)
from pyhanko.sign.validation.ades import ades_lta_validation, ades_timestamp_validation_internal
from pyhanko.sign.validation.errors import SignatureValidationError
from pyhanko.sign.validation.generic_cms import async_validate_detached_cms
from pyhanko.sign.validation.policy_decl import (
    PdfSignatureValidationSpec,
    RevinfoOnlineFetchingRule,
    RevocationInfoGatheringSpec,
    SignatureValidationSpec,
)
from pyhanko.sign.validation.status import PdfSignatureStatus
from pyhanko_certvalidator import ValidationContext
from pyhanko_certvalidator.context import CertValidationPolicySpec
from pyhanko_certvalidator.errors import InsufficientRevinfoError, PathBuildingError, PathValidationError
from pyhanko_certvalidator.ltv.types import ValidationTimingInfo
from pyhanko_certvalidator.policy_decl import REQUIRE_REVINFO, CertRevTrustPolicy, FreshnessReqType
from pyhanko_certvalidator.registry import SimpleTrustManager

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.signing import hexstrings
from evidence_pipeline.signing.keys import Keyring, signer_certificate_id
from evidence_pipeline.signing.pdf_reader import open_pdf

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

# pyHanko logs every failed path with its traceback; without a handler, Python would print them on stderr (local
# paths included). Operators who configure logging still see them; users see reason codes.
for _library in ("pyhanko", "pyhanko_certvalidator"):
    logging.getLogger(_library).addHandler(logging.NullHandler())
hexstrings.install()  # a signature's /Contents parsed in one pass, not byte by byte (hexstrings.py)

TIMESTAMPED = frozenset({"B-T", "B-LT", "B-LTA"})  # need a time stamp authority
_LONG_TERM = frozenset({"B-LT", "B-LTA"})  # embed validation material after signing
FIELD_NAME = "EvidenceSignature"
# Reserving the signature's space up front skips pyHanko's trial signature (a second full CMS build per report).
# The DSS and the document time stamp are later incremental updates: they do not grow the signature.
_RESERVED_BYTES = {"B-B": 8192, "B-T": 16384, "B-LT": 16384, "B-LTA": 16384}
# Offline, the newest document time stamp's TSA certificate can only be judged by the revocation information in the
# file (its status when the archive was time stamped), however old: an auditor who needs the TSA's current status
# asks it online; the archive stays verifiable while the TSA certificate is valid (refresh it before then).
OFFLINE_TSA_POLICY = CertRevTrustPolicy(
    REQUIRE_REVINFO, freshness=timedelta(days=36500), freshness_req_type=FreshnessReqType.MAX_DIFF_REVOCATION_VALIDATION
)

# No VRI entries (a relic that PAdES no longer uses, pyHanko's docs say), so at B-LTA the DSS is written in the
# document time stamp's revision, before the stamp: the stamp covers the whole file, and a validator diffs the
# signature against one later revision instead of two. (B-LT: the DSS in its own revision after the signature.)
_DSS_SETTINGS = DSSContentSettings(
    include_vri=False, next_ts_settings=TimestampDSSContentSettings(include_vri=False, update_before_ts=True)
)


def der_certificate(pem: bytes) -> asn1_x509.Certificate:
    return asn1_x509.Certificate.load(x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER))


@lru_cache(maxsize=4)
def _signer(keyring: Keyring) -> signers.SimpleSigner:
    signer: signers.SimpleSigner | None = signers.SimpleSigner.load(
        key_file=str(keyring.signer_key_path),
        cert_file=str(keyring.signer_cert_path),
        ca_chain_files=(str(keyring.root_cert_path),),
    )
    if signer is None:
        raise EvidenceError(ReasonCode.KEY_MATERIAL_INVALID, "the PAdES signing key or certificate does not load")
    # Checked once here, so that a signature made with these keys is valid by construction: the key must be the
    # certificate's, and the certificate issued by the trust root.
    certificate = keyring.signer_certificate
    key = serialization.load_der_private_key(signer.signing_key.dump(), password=None)
    if _spki(key.public_key()) != _spki(certificate.public_key()):
        raise EvidenceError(ReasonCode.KEY_MATERIAL_INVALID, "the PAdES signing key is not its certificate's key")
    try:
        certificate.verify_directly_issued_by(keyring.root_certificate)
    except (ValueError, TypeError, InvalidSignature):
        raise EvidenceError(
            ReasonCode.KEY_MATERIAL_INVALID, "the PAdES signer certificate is not issued by the trust root"
        ) from None
    return signer


def _spki(public_key: PublicKeyTypes) -> bytes:
    return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def sign_pdf(
    pdf: bytes | BinaryIO,
    keyring: Keyring,
    *,
    level: str = "B-B",
    tsa_url: str | None = None,
    out: BinaryIO | None = None,
    field_name: str = FIELD_NAME,
    reason: str = "Monthly compliance evidence",
) -> BinaryIO:
    """Write ``pdf`` with an embedded PAdES signature at ``level`` (B-T and above time stamped by ``tsa_url``) in
    the signature field ``field_name`` to ``out`` (readable and writable; a new BytesIO by default) and return it.
    Files are streamed, not loaded."""
    long_term = level in _LONG_TERM
    metadata = signers.PdfSignatureMetadata(
        field_name=field_name,
        md_algorithm="sha256",
        subfilter=fields.SigSeedSubFilter.PADES,
        reason=reason,
        embed_validation_info=long_term,
        use_pades_lta=level == "B-LTA",
        dss_settings=_DSS_SETTINGS,
        validation_context=_fetching_context(keyring.root_pem, keyring.tsa_root_pem) if long_term else None,
    )
    with _signing_errors("PAdES signing"):
        writer = IncrementalPdfFileWriter.from_reader(open_pdf(pdf))
        signed: BinaryIO = signers.sign_pdf(
            writer,
            metadata,
            signer=_signer(keyring),
            bytes_reserved=_RESERVED_BYTES[level],
            output=out,
            timestamper=timestamps.HTTPTimeStamper(tsa_url) if level in TIMESTAMPED else None,
        )
    return signed


@contextmanager
def _signing_errors(what: str) -> Iterator[None]:
    """pyHanko's failures while signing or time stamping, as reason codes."""
    try:
        yield
    except TimestampRequestError:
        raise EvidenceError(ReasonCode.TSA_UNAVAILABLE, "the time stamp authority did not grant a time stamp") from None
    except InsufficientRevinfoError:
        raise EvidenceError(
            ReasonCode.REVOCATION_UNAVAILABLE,
            "no current revocation information for the signer or the time stamp authority",
        ) from None
    except (PathBuildingError, PathValidationError) as error:
        raise EvidenceError(
            ReasonCode.SIGNING_FAILED, f"the signer or TSA certificate does not validate ({type(error).__name__})"
        ) from None
    except (SigningError, PdfError, OSError) as error:
        raise EvidenceError(ReasonCode.SIGNING_FAILED, f"{what} failed ({type(error).__name__})") from None


@dataclass(frozen=True)
class DocumentTimestamp:
    """The newest document time stamp of a B-LTA file: when it was made, and until when its TSA certificate (and so
    the archive's long-term validation) holds."""

    stamped: datetime
    tsa_not_after: datetime
    count: int  # the file's document time stamps: a renewal adds one
    covers_whole_file: bool  # nothing follows it, not even bytes outside a revision


def newest_document_timestamp(pdf: bytes) -> DocumentTimestamp:
    try:
        stamps = open_pdf(pdf).embedded_timestamp_signatures
        if not stamps:
            raise ValueError("no document time stamp")
        stamp = stamps[-1]
        info = stamp.signed_data["encap_content_info"]["content"].parsed
        return DocumentTimestamp(
            info["gen_time"].native,
            stamp.signer_cert["tbs_certificate"]["validity"]["not_after"].native,
            len(stamps),
            stamp.evaluate_signature_coverage() == SignatureCoverageLevel.ENTIRE_FILE,
        )
    except (PdfError, ValueError, KeyError, TypeError) as error:
        raise EvidenceError(
            ReasonCode.PDF_SIGNATURE_INVALID,
            f"the report holds no readable document time stamp ({type(error).__name__})",
        ) from None


def extends_with_timestamp(renewed: bytes, base: bytes) -> bool:
    """Is ``renewed`` a renewal of ``base``: its exact bytes, then incremental updates ending with a new document
    time stamp over the whole file?"""
    if not (renewed.startswith(base) and len(renewed) > len(base)):
        return False
    stamp = newest_document_timestamp(renewed)
    return stamp.covers_whole_file and stamp.count > newest_document_timestamp(base).count


def renew_document_timestamp(pdf: bytes, trust_root_pem: bytes, tsa_root_pem: bytes, tsa_url: str) -> bytes:
    """``pdf`` (B-LTA) followed by one incremental update: the validation material of its newest document time
    stamp (the TSA's chain and its current revocation information, fetched now) in the DSS, then a new document time
    stamp from ``tsa_url`` over all of it (ETSI EN 319 142-1 5.5, what pyHanko's
    ``update_archival_timestamp_chain`` does, here in the B-LTA layout of ``_DSS_SETTINGS``: no VRI, one revision)."""
    out = io.BytesIO(pdf)
    with _signing_errors("the document time stamp renewal"):
        asyncio.run(
            _add_archive_timestamp(
                IncrementalPdfFileWriter.from_reader(open_pdf(out)),
                _fetching_context(trust_root_pem, tsa_root_pem),
                timestamps.HTTPTimeStamper(tsa_url),
            )
        )
    return out.getvalue()


def _fetching_context(trust_root_pem: bytes, tsa_root_pem: bytes) -> ValidationContext:
    """Revocation information is required for every certificate below the roots, fetched now, and embedded."""
    return ValidationContext(
        trust_roots=[der_certificate(trust_root_pem), der_certificate(tsa_root_pem)],
        allow_fetching=True,
        revocation_mode="require",
    )


async def _add_archive_timestamp(
    writer: IncrementalPdfFileWriter, context: ValidationContext, timestamper: timestamps.TimeStamper
) -> None:
    last = writer.prev.embedded_timestamp_signatures[-1]
    status = (
        await ades_timestamp_validation_internal(
            last.signed_data,
            validation_context=context,
            expected_tst_imprint=last.compute_digest,
            ts_qualification_requirements=None,
        )
    ).api_status
    if status is None or not (status.intact and status.valid and status.trusted):
        raise EvidenceError(
            ReasonCode.PDF_SIGNATURE_UNTRUSTED,
            "the newest document time stamp no longer validates now: too late to renew it",
        )
    DocumentSecurityStore.supply_dss_in_writer(
        writer, None, paths=(status.validation_path,), validation_context=context
    )
    await signers.PdfTimeStamper(timestamper).async_timestamp_pdf(
        writer,
        status.md_algorithm,
        context,
        bytes_reserved=_RESERVED_BYTES["B-LTA"],
        in_place=True,
        dss_settings=_DSS_SETTINGS.get_settings_for_ts(),
    )


@dataclass(frozen=True)
class SignatureFacts:
    """What a validated PAdES signature says about who signed and when (the keyring checks them)."""

    signer_certificate_id: str
    claimed: datetime | None  # the signing time the signer wrote (/M or the CMS signingTime)
    stamped: datetime | None  # the RFC 3161 signature time stamp's time (B-T and above): the trustworthy one


def verify_pdf_signature(
    pdf: bytes | BinaryIO,
    trust_root_pem: bytes,
    *,
    level: str = "B-B",
    tsa_root_pem: bytes | None = None,
    at: datetime | None = None,
    field_name: str = FIELD_NAME,
    earlier: int = 0,
) -> SignatureFacts:
    """Raise unless the PDF holds our signature in ``field_name`` after exactly ``earlier`` others (a contract's own
    signatures, which ours leaves intact), intact, valid and chaining to the trust root at ``at`` (now by
    default), time stamped by a TSA under ``tsa_root_pem`` at B-T and above, and nothing after it but the DSS and
    document time stamps that its level adds. B-LTA is validated as ETSI long-term validation: it survives the
    expiry of the signer's certificate. Returns the signer's certificate id and the signature's times."""
    roots = [der_certificate(trust_root_pem)] + ([der_certificate(tsa_root_pem)] if tsa_root_pem else [])
    try:
        signature, *stamps = open_pdf(pdf).embedded_signatures[earlier:]
    except (PdfError, ValueError, KeyError) as error:
        raise EvidenceError(
            ReasonCode.PDF_SIGNATURE_INVALID,
            f"signed PDF does not parse or holds no signature ({type(error).__name__})",
        ) from None
    if (
        signature.field_name != field_name
        or (level == "B-LTA") != bool(stamps)
        or any(stamp.sig_object_type != "/DocTimeStamp" for stamp in stamps)
    ):
        raise EvidenceError(
            ReasonCode.PDF_SIGNATURE_INVALID,
            f"expected one evidence signature, followed by document time stamps only at B-LTA "
            f"(found {1 + len(stamps)} signatures)",
        )
    try:
        status, stamp_trusted = (
            _validate_long_term(signature, roots, at) if stamps else (_validate(signature, roots, level, at), None)
        )
    except (PdfError, ValueError, KeyError) as error:
        raise EvidenceError(
            ReasonCode.PDF_SIGNATURE_INVALID, f"PDF signature does not validate ({type(error).__name__})"
        ) from None
    if not (status.intact and status.valid):
        raise EvidenceError(
            ReasonCode.PDF_SIGNATURE_INVALID, "PDF signature is broken or the document changed after signing"
        )
    covered = (
        status.coverage == SignatureCoverageLevel.ENTIRE_FILE
        if level not in _LONG_TERM
        else status.modification_level in (ModificationLevel.NONE, ModificationLevel.LTA_UPDATES)
        and (stamps or [signature])[-1].evaluate_signature_coverage() >= SignatureCoverageLevel.ENTIRE_REVISION
    )
    if not covered:
        raise EvidenceError(
            ReasonCode.PDF_SIGNATURE_INVALID, "the document changed after signing beyond what its PAdES level adds"
        )
    if not status.trusted:
        raise EvidenceError(
            ReasonCode.PDF_SIGNATURE_UNTRUSTED, f"PDF signer does not chain to the published trust root at {_when(at)}"
        )
    stamp = status.timestamp_validity
    trusted = stamp is not None and (stamp.trusted if stamp_trusted is None else stamp_trusted)
    if level in TIMESTAMPED and not trusted:
        raise EvidenceError(
            ReasonCode.PDF_SIGNATURE_UNTRUSTED,
            "the signature time stamp is missing or not from the published time stamp authority",
        )
    return SignatureFacts(
        signer_certificate_id(x509.load_der_x509_certificate(status.signing_cert.dump())),
        status.signer_reported_dt or signature.self_reported_timestamp,
        stamp.timestamp if stamp is not None and trusted else None,
    )


_BYTE_RANGE = re.compile(rb"/ByteRange\s*\[\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*\]")


def check_fresh_signature(signed: io.BufferedIOBase, unsigned_size: int, trust_root_pem: bytes) -> None:
    """The self-check of a B-B signature that ``sign_pdf`` has just appended to ``unsigned_size`` bytes, before
    anything is archived. Raise unless the appended update holds the file's one /ByteRange, covering the whole
    file but the signature's own /Contents, and the CMS signature over those bytes validates by pyHanko's CMS
    validation, as in ``verify_pdf_signature``: intact, by the signer certificate's key, the certificate valid now,
    chaining to the trust root and fit for signing. It skips parsing the whole PDF (pyHanko reads the /Contents hex
    string a token at a time: half of a full verification); `evidence verify` and the adoption of a stored report
    run the full one."""

    def invalid(why: str) -> EvidenceError:
        return EvidenceError(ReasonCode.PDF_SIGNATURE_INVALID, f"the fresh signature {why}")

    size = signed.seek(0, io.SEEK_END)
    signed.seek(unsigned_size)
    update = signed.read()
    ranges = _BYTE_RANGE.findall(update)
    if len(ranges) != 1:
        raise invalid(f"is not the one byte range of the update ({len(ranges)} found)")
    start, hole, end, tail = (int(n) for n in ranges[0])
    contents = update[hole - unsigned_size : end - unsigned_size]
    if not (
        start == 0
        and unsigned_size < hole < end
        and end + tail == size
        and contents[:1] == b"<"
        and contents[-1:] == b">"
    ):
        raise invalid("does not cover the whole file but its /Contents")
    try:
        signed_data = cms.ContentInfo.load(bytes.fromhex(contents[1:-1].decode("ascii")))["content"]
        context = ValidationContext(
            trust_roots=[der_certificate(trust_root_pem)], allow_fetching=False, revocation_mode="soft-fail"
        )
        status = asyncio.run(
            async_validate_detached_cms(_Covered(signed, hole, update[end - unsigned_size :]), signed_data, context)
        )
    except (ValueError, TypeError, KeyError, SignatureValidationError) as error:
        raise invalid(f"does not validate ({type(error).__name__})") from None
    if not (status.intact and status.valid):
        raise invalid("is broken")
    if not status.trusted:
        raise EvidenceError(ReasonCode.PDF_SIGNATURE_UNTRUSTED, "PDF signer does not chain to the trust root now")


class _Covered(io.RawIOBase):
    """The bytes a byte range covers, streamed: ``file`` up to the hole, then the ``tail`` after it."""

    def __init__(self, file: io.BufferedIOBase, hole: int, tail: bytes):
        super().__init__()
        self.file, self.left, self.tail = file, hole, tail
        file.seek(0)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer, /) -> int:
        view = memoryview(buffer).cast("B")
        if self.left:
            read = self.file.readinto(view[: self.left])
            self.left -= read
            return read  # 0 before the hole (a truncated file) ends the stream: the digest will not match
        read = min(len(view), len(self.tail))
        view[:read], self.tail = self.tail[:read], self.tail[read:]
        return read


def _validate(signature: EmbeddedPdfSignature, roots: list[Any], level: str, at: datetime | None) -> PdfSignatureStatus:
    context = ValidationContext(trust_roots=roots, allow_fetching=False, revocation_mode="soft-fail", moment=at)
    if level in _LONG_TERM:
        DocumentSecurityStore.read_dss(signature.reader)  # raises NoDSSFoundError (a ValueError)
    return validate_pdf_signature(signature, context)


def _validate_long_term(
    signature: EmbeddedPdfSignature, roots: list[Any], at: datetime | None
) -> tuple[PdfSignatureStatus, bool | None]:
    """ETSI EN 319 102-1 validation with long-term availability, offline: everything from the file's DSS. Returns
    the status and, when the signature time stamp could only be validated in the past (its TSA certificate has
    expired: the document time stamps prove it existed before), that past validation's verdict, which pyHanko's
    status object does not carry (a TODO in ``_process_signature_ts``); None when the status's own applies."""
    timing = ValidationTimingInfo(at, at, True) if at else ValidationTimingInfo.now()
    result = asyncio.run(
        ades_lta_validation(signature, PdfSignatureValidationSpec(long_term_spec(roots)), timing_info=timing)
    )
    if result.ades_subindic != AdESPassed.OK or result.api_status is None:
        raise EvidenceError(
            ReasonCode.PDF_SIGNATURE_UNTRUSTED,
            f"the signature does not validate long-term at {_when(at)} ({result.ades_subindic.standard_name})",
        )
    past = result.signature_timestamp_status
    return result.api_status, None if past is None else past.ades_subindic == AdESPassed.OK


def long_term_spec(roots: list[Any]) -> SignatureValidationSpec:
    """Offline long-term validation against ``roots``: revocation information from the file's DSS only."""
    trust = SimpleTrustManager.build(trust_roots=roots)
    return SignatureValidationSpec(
        cert_validation_policy=CertValidationPolicySpec(trust, CertRevTrustPolicy(REQUIRE_REVINFO)),
        ts_cert_validation_policy=CertValidationPolicySpec(trust, OFFLINE_TSA_POLICY),
        revinfo_gathering_policy=RevocationInfoGatheringSpec(RevinfoOnlineFetchingRule.LOCAL_ONLY),
    )


def _when(at: datetime | None) -> str:
    return at.isoformat(timespec="seconds") if at else "the current time"
