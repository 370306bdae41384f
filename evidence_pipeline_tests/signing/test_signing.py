import base64
import io
import json
import shutil
import stat
import subprocess

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from securesystemslib.signer import Key
from securesystemslib.signer import Signature as SslSignature

from evidence_pipeline.documents import signature_check
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.signing import dsse
from evidence_pipeline.signing.keys import SIGNER_CERT, SIGNER_KEY, load_keyring
from evidence_pipeline.signing.pades import check_fresh_signature, sign_pdf, verify_pdf_signature
from evidence_pipeline_tests.support import hostile_pdfs
from evidence_pipeline_tests.support.fixture_sources import SMALL
from evidence_pipeline_tests.support.render import render
from evidence_pipeline_tests.support.tools import require_tool


@pytest.fixture
def keyring(tmp_path):
    return load_keyring(tmp_path / "keys", generate=True)


def test_dev_keys_are_private_and_stable(tmp_path, keyring):
    directory = tmp_path / "keys"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for name in ("statement-ed25519.key", "pades-signer.key"):
        assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600
    assert load_keyring(directory, generate=True).statement_key_id == keyring.statement_key_id


def test_missing_keys_without_generation_is_an_error(tmp_path):
    with pytest.raises(EvidenceError) as error:
        load_keyring(tmp_path / "absent", generate=False)
    assert error.value.code == "KEY_MATERIAL_INVALID"


def test_dsse_round_trip_and_generic_implementation_agrees(keyring):
    payload = dsse.canonical_json(dsse.statement("report.pdf", "ab" * 32, {"tenant": "acme-books"}))
    envelope = dsse.sign_envelope(payload, keyring.statement_key, keyring.statement_key_id)
    public = keyring.statement_key.public_key()
    body, signed_by = dsse.open_statement(envelope, {keyring.statement_key_id: public})
    assert body["subject"][0]["digest"]["sha256"] == "ab" * 32 and signed_by == (keyring.statement_key_id,)
    # securesystemslib verifies the same signature over the same PAE
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
    key = Key.from_dict(
        keyring.statement_key_id, {"keytype": "ed25519", "scheme": "ed25519", "keyval": {"public": raw}}
    )
    signature = json.loads(envelope)["signatures"][0]
    sig_hex = base64.b64decode(signature["sig"]).hex()
    key.verify_signature(SslSignature(signature["keyid"], sig_hex), dsse.pae(dsse.PAYLOAD_TYPE, payload))


def test_dsse_rejects_foreign_and_tampered(keyring):
    payload = dsse.canonical_json(dsse.statement("report.pdf", "ab" * 32, {}))
    ours = {keyring.statement_key_id: keyring.statement_key.public_key()}
    foreign = ed25519.Ed25519PrivateKey.generate()
    with pytest.raises(EvidenceError) as error:
        dsse.open_statement(dsse.sign_envelope(payload, foreign, keyring.statement_key_id), ours)
    assert error.value.code == "STATEMENT_SIGNATURE_INVALID"
    with pytest.raises(EvidenceError) as error:
        dsse.open_statement(dsse.sign_envelope(payload, foreign, "ed25519-foreign"), ours)
    assert error.value.code == "KEY_UNKNOWN"
    envelope = json.loads(dsse.sign_envelope(payload, keyring.statement_key, keyring.statement_key_id))
    envelope["payload"] = base64.b64encode(payload.replace(b"ab", b"cd", 1)).decode()
    with pytest.raises(EvidenceError) as error:
        dsse.open_statement(json.dumps(envelope).encode(), ours)
    assert error.value.code == "STATEMENT_SIGNATURE_INVALID"


def test_pades_signs_verifies_and_keeps_the_unsigned_prefix(local_runtime, keyring, tmp_path):
    _, report = render(local_runtime, SMALL)
    signed = sign_pdf(report.pdf, keyring).getvalue()
    assert signed.startswith(report.pdf) and signed != sign_pdf(report.pdf, keyring).getvalue()  # not deterministic
    verify_pdf_signature(signed, keyring.root_pem)
    other_root = load_keyring(tmp_path / "other", generate=True).root_pem
    with pytest.raises(EvidenceError) as error:
        verify_pdf_signature(signed, other_root)
    assert error.value.code == "PDF_SIGNATURE_UNTRUSTED"
    flipped = bytearray(signed)
    flipped[len(report.pdf) // 2] ^= 0x01
    with pytest.raises(EvidenceError) as error:
        verify_pdf_signature(bytes(flipped), keyring.root_pem)
    assert error.value.code == "PDF_SIGNATURE_INVALID"
    with pytest.raises(EvidenceError) as error:
        verify_pdf_signature(report.pdf, keyring.root_pem)
    assert error.value.code == "PDF_SIGNATURE_INVALID"


@pytest.mark.parametrize("foreign", [SIGNER_KEY, SIGNER_CERT], ids=["key-not-the-certificates", "not-issued-by-root"])
def test_a_signer_whose_key_or_certificate_does_not_belong_signs_nothing(local_runtime, keyring, tmp_path, foreign):
    """What is signed is not validated again after signing (documents.worker._signed_copy), so keys that cannot
    make a valid signature are refused before the first one: another keyring's signer key, or a signer
    certificate (with its key) issued by another root."""
    _, report = render(local_runtime, SMALL)
    other = load_keyring(tmp_path / "other", generate=True)
    mixed = tmp_path / "mixed"
    shutil.copytree(keyring.directory, mixed)
    for name in {foreign, SIGNER_KEY}:
        (mixed / name).chmod(0o600)
        shutil.copyfile(other.directory / name, mixed / name)
    with pytest.raises(EvidenceError) as error:
        sign_pdf(report.pdf, load_keyring(mixed, generate=False))
    assert error.value.code == "KEY_MATERIAL_INVALID"


def test_pades_signs_and_verifies_file_to_file(local_runtime, keyring, tmp_path):
    """What the pipeline does with large reports: neither the unsigned nor the signed PDF is loaded into memory."""
    _, report = render(local_runtime, SMALL)
    with open(tmp_path / "unsigned.pdf", "w+b") as unsigned, open(tmp_path / "signed.pdf", "w+b") as out:
        unsigned.write(report.pdf)
        assert sign_pdf(unsigned, keyring, out=out) is out
        verify_pdf_signature(out, keyring.root_pem)
    signed = (tmp_path / "signed.pdf").read_bytes()
    assert signed.startswith(report.pdf) and len(signed) > len(report.pdf)
    verify_pdf_signature(signed, keyring.root_pem)


def test_the_self_check_of_a_fresh_signature_refuses_what_verification_refuses(local_runtime, keyring, tmp_path):
    """The cheap check the pipeline runs before archiving a B-B report (the CMS signature over the byte range)."""
    _, report = render(local_runtime, SMALL)
    signed = sign_pdf(report.pdf, keyring).getvalue()

    def refused(data: bytes, root: bytes = keyring.root_pem, unsigned_size: int = len(report.pdf)) -> str:
        with pytest.raises(EvidenceError) as error:
            check_fresh_signature(io.BytesIO(data), unsigned_size, root)
        return error.value.code

    check_fresh_signature(io.BytesIO(signed), len(report.pdf), keyring.root_pem)
    assert refused(signed, load_keyring(tmp_path / "other", generate=True).root_pem) == "PDF_SIGNATURE_UNTRUSTED"
    for offset in (len(report.pdf) // 2, len(signed) - 10):  # in the report, in the signature's own update
        flipped = bytearray(signed)
        flipped[offset] ^= 0x01
        assert refused(bytes(flipped)) == "PDF_SIGNATURE_INVALID"
    assert refused(signed + b"\n%%EOF\n") == "PDF_SIGNATURE_INVALID"  # bytes the byte range does not cover
    assert refused(report.pdf) == "PDF_SIGNATURE_INVALID"  # no signature at all
    twice = sign_pdf(signed, keyring, field_name="Another").getvalue()
    assert refused(twice) == "PDF_SIGNATURE_INVALID"  # two signatures after the unsigned bytes
    contents = signed.index(b"/Contents <") + len(b"/Contents <")
    forged = signed[:contents] + b"0" * 64 + signed[contents + 64 :]  # the CMS itself broken
    assert refused(forged) == "PDF_SIGNATURE_INVALID"


def test_an_approval_appended_to_a_file_of_lenient_cross_reference_keeps_every_reader(keyring, tmp_path):
    """A file whose free-list head has generation 65536 (MuPDF's, some Word versions'), which pyHanko's strict
    reader refuses: the approval signature appended to it validates for pyHanko and for pdfsig and covers the whole
    file; once another signature follows, the signature check says that what changed after the first was judged
    over a cross-reference read leniently."""
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 4 0 R >>"
    lenient = hostile_pdfs.simple(hostile_pdfs.stream(b"0 g 10 10 50 50 re f"), page=page, free_generation=65536)
    signed = sign_pdf(lenient, keyring, field_name="EvidenceApproval").getvalue()
    assert signed.startswith(lenient)
    verify_pdf_signature(signed, keyring.root_pem, field_name="EvidenceApproval")
    path = tmp_path / "approved.pdf"
    path.write_bytes(signed)
    pdfsig = subprocess.run([require_tool("pdfsig"), str(path)], capture_output=True, text=True).stdout
    assert "Signature is Valid" in pdfsig and "Total document signed" in pdfsig

    policy = signature_check.trust_policy(keyring.root_pem, None)
    check = signature_check.check_signatures(io.BytesIO(signed), "0" * 64, policy, "sgc")
    assert [s["findings"] for s in check["signatures"]] == [[]]
    twice = sign_pdf(signed, keyring, field_name="Another").getvalue()
    check = signature_check.check_signatures(io.BytesIO(twice), "0" * 64, policy, "sgc")
    assert [s["findings"] for s in check["signatures"]] == [["cross_reference_lenient"], []]
