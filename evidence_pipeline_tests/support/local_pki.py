"""A test PKI with a real RFC 3161 time stamp authority, CRLs and OCSP responders, served over HTTP on 127.0.0.1.

Two roots, as in production: the signing CA (root -> PAdES signer) and a separate time stamp authority (TSA root
-> TSA). Every certificate below a root names where its revocation status is published on this server, as
``revocation`` says for its CA: a CRL distribution point, an OCSP responder (authority information access), or both
(pyHanko then asks the responder only); pyHanko fetches what they name and embeds it in the document security
store. The TSA answers with pyHanko's ``DummyTimeStamper`` (it signs with its own RSA key and certificate), behind
a plain HTTP endpoint; CRLs (signed by the CA) and OCSP responses (signed by the CA's delegated responder, RFC 6960
4.2.2.2) are issued fresh on every request. ``provision`` writes the signing material under the keyring's file
names, the way an operator provisions production keys.
"""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from asn1crypto import keys as asn1_keys
from asn1crypto import tsp
from asn1crypto import x509 as asn1_x509
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509 import ocsp
from cryptography.x509.oid import AuthorityInformationAccessOID, ExtendedKeyUsageOID, NameOID
from pyhanko.sign.timestamps.dummy_client import DummyTimeStamper

from evidence_pipeline.paths import private_dirs
from evidence_pipeline.signing import keys as keyfiles

_PEM = serialization.Encoding.PEM


@dataclass(frozen=True)
class _Authority:
    name: str
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate


class LocalPki:
    """Start with ``with LocalPki(signer_days=...) as pki``; ``pki.tsa_url`` is the TSA's address."""

    def __init__(
        self, signer_days: float = 365, tsa_days: float = 3650, revocation: dict[str, tuple[str, ...]] | None = None
    ):
        self.signer_days, self.tsa_days = signer_days, tsa_days
        self.revocation = revocation or {"signing": ("crl",), "tsa": ("crl",)}  # per CA: "crl", "ocsp" or both
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.tsa_url = f"{self.base_url}/tsa"
        now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
        self.root = self._root("signing", now)
        self.tsa_root = self._root("tsa", now)
        self.signer_key = ec.generate_private_key(ec.SECP256R1())
        self.signer = self._issue(
            self.root,
            "evidence test signer",
            self.signer_key.public_key(),
            now,
            signer_days,
            ExtendedKeyUsageOID.EMAIL_PROTECTION,
            critical_eku=False,
        )
        self._issued: tuple[x509.Certificate, ...] = (self.signer,)  # what the OCSP responders answer for
        self.rotate_tsa(tsa_days, now)
        # Each CA answers OCSP requests through a delegated responder (RFC 6960 4.2.2.2), as public CAs do.
        self._responders = {authority.name: self._responder(authority, now) for authority in (self.root, self.tsa_root)}
        self.requests: list[str] = []  # paths served, in order: what the signer actually fetched
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def signer_not_after(self) -> dt.datetime:
        return self.signer.not_valid_after_utc

    @property
    def tsa_not_after(self) -> dt.datetime:
        return self.tsa_certificate.not_valid_after_utc

    def rotate_tsa(self, days: float, now: dt.datetime | None = None) -> None:
        """The TSA answers from now on with a new key and certificate (valid ``days``) under the same TSA root, as a
        TSA does before its certificate expires; the old certificate's status is still answered."""
        now = now or dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)  # DummyTimeStamper is RSA-only
        self.tsa_certificate = self._issue(
            self.tsa_root,
            "evidence test TSA",
            key.public_key(),
            now,
            days,
            ExtendedKeyUsageOID.TIME_STAMPING,
            critical_eku=True,
        )
        self._issued += (self.tsa_certificate,)
        self._stamper = DummyTimeStamper(
            tsa_cert=asn1_x509.Certificate.load(self.tsa_certificate.public_bytes(serialization.Encoding.DER)),
            tsa_key=asn1_keys.PrivateKeyInfo.load(
                key.private_bytes(
                    serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                )
            ),
        )

    def __enter__(self) -> LocalPki:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def provision(self, directory: Path, root_key: Path | None = None) -> Path:
        """Write a keyring (statement key, signing root, signer key and certificate, TSA root) into ``directory``;
        with ``root_key``, also the signing root's private key there (what `evidence keys rotate` needs)."""
        private_dirs(directory)
        if root_key is not None:
            keyfiles._write_private(root_key, self.root.key)
        (directory / keyfiles.ROOT_CERT).write_bytes(self.root.certificate.public_bytes(_PEM))
        (directory / keyfiles.SIGNER_CERT).write_bytes(self.signer.public_bytes(_PEM))
        (directory / keyfiles.TSA_ROOT_CERT).write_bytes(self.tsa_root.certificate.public_bytes(_PEM))
        keyfiles._write_private(directory / keyfiles.SIGNER_KEY, self.signer_key)
        keyfiles._write_private(directory / keyfiles.STATEMENT_KEY, ed25519.Ed25519PrivateKey.generate())
        return directory

    def _revocation_extensions(self, issuer: str) -> list[x509.ExtensionType]:
        extensions: list[x509.ExtensionType] = []
        if "crl" in self.revocation[issuer]:
            extensions.append(
                x509.CRLDistributionPoints(
                    [
                        x509.DistributionPoint(
                            [x509.UniformResourceIdentifier(f"{self.base_url}/crl/{issuer}.crl")], None, None, None
                        )
                    ]
                )
            )
        if "ocsp" in self.revocation[issuer]:
            extensions.append(
                x509.AuthorityInformationAccess(
                    [
                        x509.AccessDescription(
                            AuthorityInformationAccessOID.OCSP,
                            x509.UniformResourceIdentifier(f"{self.base_url}/ocsp/{issuer}"),
                        )
                    ]
                )
            )
        return extensions

    def _root(self, authority: str, now: dt.datetime) -> _Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"evidence test {authority} root")])
        certificate = (
            keyfiles.certificate_builder(name, name, key.public_key(), now, now + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(key, hashes.SHA256())
        )
        return _Authority(authority, key, certificate)

    def _issue(
        self, issuer: _Authority, common_name: str, public_key, now: dt.datetime, days: float, eku, critical_eku: bool
    ) -> x509.Certificate:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        until = now + dt.timedelta(days=days)
        builder = (
            keyfiles.certificate_builder(name, issuer.certificate.subject, public_key, now, until)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, True, False, False, False, False, False, False, False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([eku]), critical=critical_eku)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()), critical=False)
        )
        for extension in self._revocation_extensions(issuer.name):
            builder = builder.add_extension(extension, critical=False)
        return builder.sign(issuer.key, hashes.SHA256())

    def crl(self, authority: str) -> bytes | None:
        issuer = {self.root.name: self.root, self.tsa_root.name: self.tsa_root}.get(authority)
        if issuer is None:
            return None
        now = dt.datetime.now(dt.timezone.utc)
        return (
            x509.CertificateRevocationListBuilder()
            .issuer_name(issuer.certificate.subject)
            .last_update(now - dt.timedelta(minutes=1))
            .next_update(now + dt.timedelta(days=7))
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()), critical=False)
            .add_extension(x509.CRLNumber(int(now.timestamp() * 1000)), critical=False)
            .sign(issuer.key, hashes.SHA256())
            .public_bytes(serialization.Encoding.DER)
        )

    def _responder(self, issuer: _Authority, now: dt.datetime) -> _Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"evidence test {issuer.name} OCSP responder")])
        certificate = (
            keyfiles.certificate_builder(
                name, issuer.certificate.subject, key.public_key(), now, issuer.certificate.not_valid_after_utc
            )
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.OCSP_SIGNING]), critical=True)
            .add_extension(x509.OCSPNoCheck(), critical=False)  # its own status is not asked (RFC 6960 4.2.2.2.1)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()), critical=False)
            .sign(issuer.key, hashes.SHA256())
        )
        return _Authority(issuer.name, key, certificate)

    def ocsp(self, authority: str, request: bytes) -> bytes | None:
        """The answer (good, fresh) of ``authority``'s delegated responder about the certificate the request names;
        None if that CA issued no such certificate. A nonce in the request is echoed."""
        issuer, responder = (
            {self.root.name: self.root, self.tsa_root.name: self.tsa_root}.get(authority),
            self._responders.get(authority),
        )
        asked = ocsp.load_der_ocsp_request(request)
        issued = [
            cert
            for cert in self._issued
            if issuer is not None
            and cert.serial_number == asked.serial_number
            and cert.issuer == issuer.certificate.subject
        ]
        if not issued:
            return None
        now = dt.datetime.now(dt.timezone.utc)
        builder = (
            ocsp.OCSPResponseBuilder()
            .add_response(
                cert=issued[0],
                issuer=issuer.certificate,
                algorithm=asked.hash_algorithm,
                cert_status=ocsp.OCSPCertStatus.GOOD,
                this_update=now - dt.timedelta(minutes=1),
                next_update=now + dt.timedelta(days=7),
                revocation_time=None,
                revocation_reason=None,
            )
            .responder_id(ocsp.OCSPResponderEncoding.HASH, responder.certificate)
            .certificates([responder.certificate])
        )
        for extension in asked.extensions:
            if isinstance(extension.value, x509.OCSPNonce):
                builder = builder.add_extension(extension.value, critical=False)
        return builder.sign(responder.key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)

    def time_stamp(self, request: bytes) -> bytes:
        return self._stamper.request_tsa_response(tsp.TimeStampReq.load(request)).dump()


def _handler(pki: LocalPki) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            kind = self.headers.get("Content-Type")
            if self.path == "/tsa" and kind == "application/timestamp-query":
                return self._answer(200, pki.time_stamp(body), "application/timestamp-reply")
            answer = (
                pki.ocsp(self.path.removeprefix("/ocsp/"), body)
                if (self.path.startswith("/ocsp/") and kind == "application/ocsp-request")
                else None
            )
            if answer is None:
                return self._answer(404, b"", "text/plain")
            self._answer(200, answer, "application/ocsp-response")

        def do_GET(self) -> None:  # noqa: N802
            name = self.path.removeprefix("/crl/").removesuffix(".crl")
            crl = pki.crl(name) if self.path.startswith("/crl/") else None
            if crl is None:
                return self._answer(404, b"", "text/plain")
            self._answer(200, crl, "application/pkix-crl")

        def _answer(self, status: int, body: bytes, content_type: str) -> None:
            pki.requests.append(f"{self.command} {self.path} {status}")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:  # keep the test output clean
            pass

    return Handler
