"""PAdES signatures with pyHanko.

Signing appends an incremental update, so the signed file starts with the exact unsigned bytes: a bundle can be
tied back to its deterministic unsigned report by hashing that prefix. Signatures themselves are not
deterministic (random /ID, signing time), which is why bundles are identified by the unsigned digest.
"""

from __future__ import annotations

from functools import lru_cache
from typing import BinaryIO

from asn1crypto import x509 as asn1_x509
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.pdf_utils.misc import PdfError
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign import fields, signers, timestamps
from pyhanko.sign.general import SigningError
from pyhanko.sign.validation import validate_pdf_signature
from pyhanko_certvalidator import ValidationContext

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.signing.keys import Keyring
from evidence_pipeline.store import readable

FIELD_NAME = "EvidenceSignature"
# Reserving the signature's space up front skips pyHanko's trial signature (a second full CMS build per report).
_RESERVED_BYTES = {"B-B": 8192, "B-T": 16384}


@lru_cache(maxsize=4)
def _signer(keyring: Keyring) -> signers.SimpleSigner:
    signer = signers.SimpleSigner.load(
        key_file=str(keyring.signer_key_path),
        cert_file=str(keyring.signer_cert_path),
        ca_chain_files=(str(keyring.root_cert_path),),
    )
    if signer is None:
        raise EvidenceError(ReasonCode.KEY_MATERIAL_INVALID, "the PAdES signing key or certificate does not load")
    return signer


def sign_pdf(pdf: bytes | BinaryIO, keyring: Keyring, level: str = "B-B", tsa_url: str | None = None,
             out: BinaryIO | None = None) -> BinaryIO:
    """Write ``pdf`` with an embedded PAdES signature at ``level`` (B-B, or B-T with a time stamp authority) to
    ``out`` (readable and writable; a new BytesIO by default) and return it. Files are streamed, not loaded."""
    timestamper = timestamps.HTTPTimeStamper(tsa_url) if level == "B-T" else None
    metadata = signers.PdfSignatureMetadata(
        field_name=FIELD_NAME,
        md_algorithm="sha256",
        subfilter=fields.SigSeedSubFilter.PADES,
        reason="Monthly compliance evidence",
    )
    try:
        writer = IncrementalPdfFileWriter(readable(pdf), strict=True)
        return signers.sign_pdf(
            writer, metadata, signer=_signer(keyring), timestamper=timestamper, bytes_reserved=_RESERVED_BYTES[level],
            output=out,
        )
    except (SigningError, PdfError, OSError) as error:
        raise EvidenceError(ReasonCode.SIGNING_FAILED, f"PAdES signing failed ({type(error).__name__})") from None


def verify_pdf_signature(pdf: bytes | BinaryIO, trust_root_pem: bytes) -> None:
    """Raise unless the PDF has one signature that covers the whole file, is intact, valid and chains to the root."""
    root = asn1_x509.Certificate.load(
        x509.load_pem_x509_certificate(trust_root_pem).public_bytes(serialization.Encoding.DER)
    )
    try:
        reader = PdfFileReader(readable(pdf), strict=True)
        signatures = reader.embedded_signatures
    except (PdfError, ValueError, KeyError) as error:
        raise EvidenceError(ReasonCode.PDF_SIGNATURE_INVALID,
                            f"signed PDF does not parse ({type(error).__name__})") from None
    if len(signatures) != 1:
        raise EvidenceError(ReasonCode.PDF_SIGNATURE_INVALID,
                            f"expected exactly one PDF signature, found {len(signatures)}")
    context = ValidationContext(trust_roots=[root], allow_fetching=False, revocation_mode="soft-fail")
    try:
        status = validate_pdf_signature(signatures[0], context)
    except (PdfError, ValueError, KeyError) as error:
        raise EvidenceError(ReasonCode.PDF_SIGNATURE_INVALID,
                            f"PDF signature does not validate ({type(error).__name__})") from None
    if not (status.intact and status.valid):
        raise EvidenceError(ReasonCode.PDF_SIGNATURE_INVALID,
                            "PDF signature is broken or the document changed after signing")
    if status.coverage is None or status.coverage.name != "ENTIRE_FILE":
        raise EvidenceError(ReasonCode.PDF_SIGNATURE_INVALID, "PDF signature does not cover the entire file")
    if not status.trusted:
        raise EvidenceError(ReasonCode.PDF_SIGNATURE_UNTRUSTED, "PDF signer does not chain to the published trust root")
