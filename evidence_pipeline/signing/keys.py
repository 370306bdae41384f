"""Signing keys: an Ed25519 statement key and an X.509 chain (root CA -> signer) for PAdES.

Development keys are generated on first use into a private directory (0700, files 0600) outside the archive;
production provisions the same file names and sets EVIDENCE_GENERATE_DEV_KEYS=0 so a missing key is an error,
never a silent new identity. Only public keys and the trust root are ever published (put-once under keys/).

A ``Keyring`` is one generation of signing keys (statement key + PAdES signer). Generation 1 lives at the top of
the keys directory (the layout from before key rotation); `evidence keys rotate` adds generation n under
``generations/<n:06d>/`` with the same file names, issued by the same root (signing/rotation.py). The root
certificate, the root's private key (development only) and the TSA root stay at the top, shared by every generation.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
import stat
import uuid
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import cast, get_args

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.types import (
    CertificateIssuerPrivateKeyTypes,
    CertificatePublicKeyTypes,
    PrivateKeyTypes,
)
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.paths import private_dirs
from evidence_pipeline.store import ArtifactStore, StoredObject

STATEMENT_KEY = "statement-ed25519.key"
ROOT_CERT = "pades-root.pem"
SIGNER_KEY = "pades-signer.key"
SIGNER_CERT = "pades-signer.pem"
TSA_ROOT_CERT = "tsa-root.pem"  # the time stamp authority's root, provisioned for B-T and above
ROOT_KEY = "pades-root.key"  # the trust root's private key: kept by development keys; production holds it offline
GENERATIONS = "generations"  # generation n > 1 of the signing keys: generations/<n:06d>/
_VALIDITY = dt.timedelta(days=3650)
MAX_KEY_BYTES = 64 << 10  # a published PEM is a few hundred bytes to a few KB
_PEM = serialization.Encoding.PEM


def public_key_id(public_key: ed25519.Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519-" + hashlib.sha256(raw).hexdigest()[:16]


def certificate_id(certificate: x509.Certificate) -> str:
    return "x509-root-" + certificate.fingerprint(hashes.SHA256()).hex()[:16]


def signer_certificate_id(certificate: x509.Certificate) -> str:
    """A PAdES signer certificate's id: its SHA-256 fingerprint, like a root's, with its own prefix."""
    return "x509-signer-" + certificate.fingerprint(hashes.SHA256()).hex()[:16]


def generation_directory(home: Path, generation: int) -> Path:
    """Where generation ``generation`` of the signing keys lives below the keys directory ``home``."""
    return home if generation == 1 else home / GENERATIONS / f"{generation:06d}"


@dataclass(frozen=True)
class Keyring:
    """One generation of signing keys. ``home`` is the keys directory (root certificates); ``directory`` holds
    this generation's statement key, signer key and signer certificate (the same folder for generation 1)."""

    directory: Path
    home: Path | None = None
    generation: int = 1

    @property
    def _home(self) -> Path:
        return self.home or self.directory

    @cached_property
    def statement_key(self) -> ed25519.Ed25519PrivateKey:
        try:
            key = serialization.load_pem_private_key(self._read(STATEMENT_KEY), password=None)
        except (ValueError, TypeError):
            raise EvidenceError(ReasonCode.KEY_MATERIAL_INVALID, "the statement key does not load") from None
        if not isinstance(key, ed25519.Ed25519PrivateKey):
            raise EvidenceError(ReasonCode.KEY_MATERIAL_INVALID, "statement key is not Ed25519")
        return key

    @cached_property
    def statement_key_id(self) -> str:
        return public_key_id(self.statement_key.public_key())

    @cached_property
    def statement_public_key(self) -> ed25519.Ed25519PublicKey:
        return self.statement_key.public_key()

    @cached_property
    def signer_certificate(self) -> x509.Certificate:
        try:
            return x509.load_pem_x509_certificate(self._read(SIGNER_CERT))
        except ValueError:
            raise EvidenceError(ReasonCode.KEY_MATERIAL_INVALID, "the PAdES signer certificate does not load") from None

    @cached_property
    def signer_certificate_id(self) -> str:
        return signer_certificate_id(self.signer_certificate)

    @cached_property
    def root_certificate(self) -> x509.Certificate:
        try:
            return x509.load_pem_x509_certificate(self._read(ROOT_CERT, shared=True))
        except ValueError:
            raise EvidenceError(ReasonCode.KEY_MATERIAL_INVALID, "the PAdES trust root does not load") from None

    @cached_property
    def root_pem(self) -> bytes:
        return self.root_certificate.public_bytes(_PEM)

    @cached_property
    def root_id(self) -> str:
        return certificate_id(self.root_certificate)

    @cached_property
    def tsa_root_pem(self) -> bytes:
        """The time stamp authority's root (B-T and above): it vouches for the time stamps and their DSS material."""
        try:
            return x509.load_pem_x509_certificate(self._read(TSA_ROOT_CERT, shared=True)).public_bytes(_PEM)
        except ValueError:
            raise EvidenceError(ReasonCode.KEY_MATERIAL_INVALID, "the TSA's root certificate does not load") from None

    @cached_property
    def tsa_root_id(self) -> str:
        return certificate_id(x509.load_pem_x509_certificate(self.tsa_root_pem))

    @property
    def signer_key_path(self) -> Path:
        return self.directory / SIGNER_KEY

    @property
    def signer_cert_path(self) -> Path:
        return self.directory / SIGNER_CERT

    @property
    def root_cert_path(self) -> Path:
        return self._home / ROOT_CERT

    def _read(self, name: str, shared: bool = False) -> bytes:
        try:
            return ((self._home if shared else self.directory) / name).read_bytes()
        except FileNotFoundError:
            raise EvidenceError(
                ReasonCode.KEY_MATERIAL_INVALID, f"key file {name} is missing from the keys directory"
            ) from None

    def publish_public_keys(self, store: ArtifactStore) -> list[StoredObject]:
        """Put-once the statement public key, the PAdES signer certificate, the trust root and the time stamp
        authority's root (when one is provisioned) under keys/, named by key id."""
        statement_pem = self.statement_public_key.public_bytes(_PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        published = [
            store.put_once(f"keys/{self.statement_key_id}.pem", statement_pem),
            store.put_once(f"keys/{self.signer_certificate_id}.pem", self.signer_certificate.public_bytes(_PEM)),
            store.put_once(f"keys/{self.root_id}.pem", self.root_pem),
        ]
        if (self._home / TSA_ROOT_CERT).exists():
            published.append(store.put_once(f"keys/{self.tsa_root_id}.pem", self.tsa_root_pem))
        return published


def published_statement_keys(
    store: ArtifactStore, expected: frozenset[str] = frozenset()
) -> dict[str, ed25519.Ed25519PublicKey]:
    """The Ed25519 statement keys published under keys/ (only ``expected`` ids, when given), by key id."""
    return published_ed25519_keys(store, "keys", expected)


def published_ed25519_keys(
    store: ArtifactStore, prefix: str, expected: frozenset[str] = frozenset()
) -> dict[str, ed25519.Ed25519PublicKey]:
    """The Ed25519 public keys published under ``prefix`` as <key id>.pem (only ``expected`` ids, when given)."""
    keys = {}
    for key in store.list(prefix):
        key_id = key.rsplit("/", 1)[-1].removesuffix(".pem")
        if not key_id.startswith("ed25519-") or (expected and key_id not in expected):
            continue
        public = ed25519_public(store.get(key, max_bytes=MAX_KEY_BYTES))  # None: not a key, it vouches for nothing
        # A key id names the key's own bytes, so a swapped file cannot borrow a pinned id.
        if public is not None and public_key_id(public) == key_id:
            keys[key_id] = public
    return keys


def load_witness_key(path: Path) -> ed25519.Ed25519PrivateKey:
    """The checkpoint witness's Ed25519 private key (EVIDENCE_WITNESS_KEY). It is never generated: a witness
    created beside the statement key would witness nothing."""
    return load_private_ed25519(path, "the witness key (EVIDENCE_WITNESS_KEY)")


def load_private_ed25519(path: Path, what: str) -> ed25519.Ed25519PrivateKey:
    """An Ed25519 private key from ``path``: a regular file (not a link) readable by its owner only, unencrypted
    PKCS#8 PEM. ``what`` names it in the messages."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        raise EvidenceError(ReasonCode.KEY_MATERIAL_INVALID, f"{what} names no readable file") from None
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(handle.fileno()).st_mode
        if not stat.S_ISREG(mode) or mode & 0o077:
            raise EvidenceError(
                ReasonCode.KEY_MATERIAL_INVALID, f"{what} must be a regular file of mode 0600 (or stricter)"
            )
        pem = handle.read(MAX_KEY_BYTES)
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError):
        raise EvidenceError(ReasonCode.KEY_MATERIAL_INVALID, f"{what} does not load") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise EvidenceError(ReasonCode.KEY_MATERIAL_INVALID, f"{what} is not Ed25519")
    return key


def ed25519_public(pem: bytes) -> ed25519.Ed25519PublicKey | None:
    """The Ed25519 public key of a PEM document, or None when it holds none."""
    try:
        public = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError):
        return None
    return public if isinstance(public, ed25519.Ed25519PublicKey) else None


def pinned_public_key(path: Path, what: str) -> ed25519.Ed25519PublicKey:
    """An Ed25519 public key the user gives as a PEM file (a witness they pinned); CONFIG_INVALID otherwise."""
    try:
        with open(path, "rb") as handle:
            public = ed25519_public(handle.read(MAX_KEY_BYTES))
    except OSError:
        public = None
    if public is None:
        raise EvidenceError(ReasonCode.CONFIG_INVALID, f"{what} takes a PEM file of an Ed25519 public key")
    return public


def public_pem(key: ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey) -> bytes:
    public = key.public_key() if isinstance(key, ed25519.Ed25519PrivateKey) else key
    return public.public_bytes(_PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def load_keyring(directory: Path, generate: bool) -> Keyring:
    """Load the keyring, generating development keys atomically on first use if allowed."""
    if not (directory / STATEMENT_KEY).exists():
        if not generate:
            raise EvidenceError(
                ReasonCode.KEY_MATERIAL_INVALID, "no signing keys provisioned and key generation is disabled"
            )
        _generate_dev_keys(directory)
    return Keyring(directory)


def _generate_dev_keys(directory: Path) -> None:
    private_dirs(directory.parent)
    staging = directory.parent / f".keys-{uuid.uuid4().hex}"
    staging.mkdir(mode=0o700)
    try:
        now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
        root_key = ec.generate_private_key(ec.SECP384R1())
        root_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "evidence_pipeline development root")])
        root = (
            certificate_builder(root_name, root_name, root_key.public_key(), now)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_usage(cert_sign=True), critical=True)
            .sign(root_key, hashes.SHA256())
        )
        (staging / ROOT_CERT).write_bytes(root.public_bytes(_PEM))
        # The development root's private key is kept (0600) so that `evidence keys rotate` can issue the next
        # generation and sign keyring documents; production keeps its root offline (--root-key).
        _write_private(staging / ROOT_KEY, root_key)
        write_generation(staging, root_key, root, now)
        try:
            os.rename(staging, directory)  # atomic; a concurrent first use loses the race and loads the winner's
        except OSError:
            if not (directory / STATEMENT_KEY).exists():
                raise EvidenceError(
                    ReasonCode.KEY_MATERIAL_INVALID, "the keys directory exists but holds no statement key"
                ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_generation(
    directory: Path,
    root_key: CertificateIssuerPrivateKeyTypes,
    root: x509.Certificate,
    now: dt.datetime,
    template: x509.Certificate | None = None,
) -> None:
    """Write a new statement key, PAdES signer key and signer certificate (issued by ``root``) into ``directory``.

    With ``template`` (the previous generation's signer certificate) the new certificate keeps its subject, its
    lifetime and its extensions (key usage, CRL distribution points, OCSP addresses, policies), with a fresh
    serialNumber attribute in the subject, so that long-term signatures find revocation information for it too.
    Files are created exclusively, private keys 0600."""
    signer_key = ec.generate_private_key(ec.SECP256R1())
    subject: list[x509.NameAttribute[str | bytes]]
    if template is None:
        subject = [x509.NameAttribute(NameOID.COMMON_NAME, "evidence_pipeline development signer")]
        lifetime = _VALIDITY
        extensions = [
            (x509.BasicConstraints(ca=False, path_length=None), True),
            (_usage(cert_sign=False), True),
            (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.EMAIL_PROTECTION]), False),
        ]
    else:
        subject = [a for a in template.subject if a.oid != NameOID.SERIAL_NUMBER]
        lifetime = template.not_valid_after_utc - template.not_valid_before_utc
        skip = (x509.SubjectKeyIdentifier.oid, x509.AuthorityKeyIdentifier.oid)
        extensions = [(e.value, e.critical) for e in template.extensions if e.oid not in skip]
    name = x509.Name([*subject, x509.NameAttribute(NameOID.SERIAL_NUMBER, uuid.uuid4().hex)])
    # The signer never outlives its issuer.
    until = min(now - dt.timedelta(minutes=5) + lifetime, root.not_valid_after_utc)
    builder = certificate_builder(name, root.subject, signer_key.public_key(), now, until)
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    signer = builder.add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_public_key(root_key.public_key()), critical=False
    ).sign(root_key, hashes.SHA256())
    _write_private(directory / STATEMENT_KEY, ed25519.Ed25519PrivateKey.generate())
    _write_private(directory / SIGNER_KEY, signer_key)
    fd = os.open(directory / SIGNER_CERT, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(signer.public_bytes(_PEM))


def load_root_key(path: Path, root: x509.Certificate) -> CertificateIssuerPrivateKeyTypes:
    """The trust root's private key from ``path``; it must be the key of the ``root`` certificate."""
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except FileNotFoundError:
        raise EvidenceError(
            ReasonCode.KEY_MATERIAL_INVALID, "the trust root's private key is not available (pass --root-key)"
        ) from None
    except (ValueError, TypeError):
        raise EvidenceError(ReasonCode.KEY_MATERIAL_INVALID, "the trust root's private key does not load") from None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(_PEM, public) != root.public_key().public_bytes(_PEM, public):
        raise EvidenceError(ReasonCode.KEY_MATERIAL_INVALID, "the private key given is not the trust root's key")
    if not isinstance(key, get_args(CertificateIssuerPrivateKeyTypes)):
        raise EvidenceError(ReasonCode.KEY_MATERIAL_INVALID, "the trust root's key cannot sign certificates")
    return cast(CertificateIssuerPrivateKeyTypes, key)  # the union, checked at run time just above


def certificate_builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: CertificatePublicKeyTypes,
    now: dt.datetime,
    until: dt.datetime | None = None,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(until or now + _VALIDITY)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def _usage(cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=not cert_sign,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _write_private(path: Path, key: PrivateKeyTypes) -> None:
    pem = key.private_bytes(_PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
