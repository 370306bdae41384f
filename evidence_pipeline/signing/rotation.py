"""Generations of signing keys in the keys directory: which one signs now, rotation and revocation.

Layout of ``EVIDENCE_KEYS_DIR`` (0700; private keys 0600)::

    pades-root.pem            the trust root's certificate, shared by every generation
    pades-root.key            the trust root's private key: development keys keep it here; production keeps it
                              offline and hands it to `evidence keys rotate|revoke|publish --root-key PATH`
    tsa-root.pem              the time stamp authority's root (B-T and above)
    statement-ed25519.key, pades-signer.key, pades-signer.pem
                              generation 1: the single-generation layout from before key rotation, unchanged
    generations/000002/…      generation 2 and later, the same three files each
    keyring.json              the newest keyring document (signing/keyring_document.py), byte for byte as
                              published under keys/ in the archive; absent until the first one is published,
                              and then generation 1 is the only one
    keyring.lock              signers take it shared for an instant per bundle, rotation and revocation exclusively

Which generation signs is read per bundle (`KeyDirectory.select`): a stat of keyring.json, and a parse only when it
changed, under the shared lock, which is also where the signing time is taken. A rotation holds the lock
exclusively while it retires the active generation at time T, writes keyring.json and publishes the document, so
every signature falls wholly before T (old generation, signing time <= T) or after it (new generation, >= T): a
batch that runs across a rotation signs each bundle with the generation active at its signing time, and every
process that signs from this keys directory sees it at its next bundle.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.signing.keyring_document import (
    ACTIVE,
    RETIRED,
    REVOKED,
    Generation,
    KeyringDocument,
    keyring_key,
    open_keyring,
)
from evidence_pipeline.signing.keys import (
    GENERATIONS,
    ROOT_KEY,
    Keyring,
    generation_directory,
    load_root_key,
    write_generation,
)
from evidence_pipeline.store import ArtifactStore

STATE = "keyring.json"
LOCK = "keyring.lock"
MAX_REASON = 500


def now() -> datetime:
    """UTC now, truncated to the millisecond the documents record, so a recorded time compares equal to itself."""
    moment = datetime.now(timezone.utc)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


class KeyDirectory:
    """The keys directory of a signing process. ``archive``, when given, receives every generation's public keys and
    the keyring document whenever this process sees keyring.json change (put-once: it converges on what a rotation
    already published, and heals a rotation that stopped between writing keyring.json and publishing)."""

    def __init__(self, home: Path, archive: ArtifactStore | None = None):
        self.home = home
        self.archive = archive
        self._stamp: tuple[int, int, int] | None | bool = False  # False: never read
        self._document: KeyringDocument | None = None
        self._envelope: bytes | None = None
        self._keyrings: dict[int, Keyring] = {}

    def select(self) -> tuple[Keyring, datetime]:
        """The generation to sign with now, and the signing time to record with it."""
        with self._locked(fcntl.LOCK_SH):
            self._refresh()
            signed_at = now()
            generation = self._document.active.generation if self._document else 1
        return self.keyring(generation), signed_at

    @property
    def active(self) -> Keyring:
        return self.select()[0]

    @property
    def document(self) -> KeyringDocument | None:
        """The newest keyring document of this directory (None before the first is published)."""
        with self._locked(fcntl.LOCK_SH):
            self._refresh()
            return self._document

    def keyring(self, generation: int) -> Keyring:
        if generation not in self._keyrings:
            self._keyrings[generation] = Keyring(generation_directory(self.home, generation), self.home, generation)
        return self._keyrings[generation]

    def keyrings(self) -> list[Keyring]:
        """Every generation this directory holds, oldest first."""
        with self._locked(fcntl.LOCK_SH):
            self._refresh()
            return self._generations()

    def _generations(self) -> list[Keyring]:
        document = self._document
        return [self.keyring(g.generation) for g in document.generations] if document else [self.keyring(1)]

    def _publish(self) -> None:
        """Put-once every generation's public keys and the keyring document in the archive (lock held)."""
        if self.archive is None:
            return
        for keyring in self._generations():
            keyring.publish_public_keys(self.archive)
        if self._document is not None and self._envelope is not None:
            self.archive.put_once(keyring_key(self._document.sequence), self._envelope)

    def ensure_keyring(self, root_key_path: Path | None = None) -> KeyringDocument:
        """The keyring document; the first one (generation 1 active since its signer certificate's start) is signed
        and published now if there is none yet. Needs the trust root's private key only then."""
        with self._locked(fcntl.LOCK_EX):
            self._refresh()
            if self._document is None:
                self._write(self._genesis(), self._root_key(root_key_path))
            return self._current()[0]

    def rotate(
        self, root_key_path: Path | None = None, revoke_active: str | None = None, revoked_at: datetime | None = None
    ) -> KeyringDocument:
        """Create generation n+1, make it active and retire generation n at the same instant; publish the keyring.
        With ``revoke_active`` (a reason), generation n is revoked instead of retired."""
        if revoked_at is not None and revoked_at > now():
            raise EvidenceError(ReasonCode.CONFIG_INVALID, "a revocation time cannot be in the future")
        with self._locked(fcntl.LOCK_EX):
            root_key = self._root_key(root_key_path)
            self._refresh()
            if self._document is None:
                self._write(self._genesis(), root_key)
            document, envelope = self._current()
            number = len(document.generations) + 1
            template = self.keyring(document.active.generation).signer_certificate
            keyring = self._new_generation(number, root_key, template)
            switch = now()
            generations = [
                g
                if g.status != ACTIVE
                else replace(
                    g,
                    status=REVOKED if revoke_active else RETIRED,
                    not_after=switch,
                    revoked_at=(revoked_at or switch) if revoke_active else None,
                    revocation_reason=revoke_active,
                )
                for g in document.generations
            ]
            generations.append(_generation(keyring, switch))
            self._write(document.next(switch, envelope, generations), root_key)
            return self._current()[0]

    def revoke(
        self, key_id: str, reason: str, at: datetime | None = None, root_key_path: Path | None = None
    ) -> tuple[KeyringDocument, bool]:
        """Revoke the generation that holds ``key_id`` as of ``at`` (now by default). Revoking the active generation
        rotates first, in the same keyring document. Returns (the new keyring, whether it rotated)."""
        if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON or not reason.isprintable():
            raise EvidenceError(
                ReasonCode.CONFIG_INVALID, f"a revocation reason is 1-{MAX_REASON} printable characters"
            )
        reason = reason.strip()
        document = self.ensure_keyring(root_key_path)
        generation = document.find(key_id)
        if generation is None:
            raise EvidenceError(ReasonCode.KEY_UNKNOWN, f"{key_id} is not in this keys directory's keyring")
        if generation.status == ACTIVE:
            return self.rotate(root_key_path, revoke_active=reason, revoked_at=at), True
        with self._locked(fcntl.LOCK_EX):
            root_key = self._root_key(root_key_path)
            self._refresh()
            document, envelope = self._current()
            moment = at or now()
            if moment > now():
                raise EvidenceError(ReasonCode.CONFIG_INVALID, "a revocation time cannot be in the future")
            generations = [
                replace(g, status=REVOKED, revoked_at=moment, revocation_reason=reason)
                if g.generation == generation.generation
                else g
                for g in document.generations
            ]
            self._write(document.next(now(), envelope, generations), root_key)
            return self._current()[0], False

    # -- internals ---------------------------------------------------------------------------------------------

    def _current(self) -> tuple[KeyringDocument, bytes]:
        """The keyring document read last and its envelope, once there is one (found or just written)."""
        if self._document is None or self._envelope is None:
            raise EvidenceError(ReasonCode.KEY_MATERIAL_INVALID, "the keys directory has no keyring document")
        return self._document, self._envelope

    @contextmanager
    def _locked(self, mode: int) -> Iterator[None]:
        fd = os.open(self.home / LOCK, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, mode)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _refresh(self) -> None:
        """Re-read keyring.json if it changed since the last look (a stat per call otherwise)."""
        path = self.home / STATE
        try:
            info = os.stat(path)
            stamp = (info.st_ino, info.st_mtime_ns, info.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp == self._stamp:
            return
        if stamp is None:
            self._document = self._envelope = None
        else:
            envelope = path.read_bytes()
            root = self.keyring(1).root_certificate
            self._document, self._envelope = open_keyring(envelope, root), envelope
        self._publish()
        self._stamp = stamp  # only once published: a failed publication is tried again by the next signature

    def _root_key(self, path: Path | None) -> CertificateIssuerPrivateKeyTypes:
        return load_root_key(path or self.home / ROOT_KEY, self.keyring(1).root_certificate)

    def _genesis(self) -> KeyringDocument:
        first = self.keyring(1)
        return KeyringDocument(
            sequence=1,
            issued_at=now(),
            trust_root_id=first.root_id,
            previous_sha256=None,
            generations=(_generation(first, first.signer_certificate.not_valid_before_utc),),
        )

    def _new_generation(
        self, number: int, root_key: CertificateIssuerPrivateKeyTypes, template: x509.Certificate
    ) -> Keyring:
        """Write generation ``number``'s keys into a private staging folder, then rename it into place."""
        target = generation_directory(self.home, number)
        parent = self.home / GENERATIONS
        parent.mkdir(mode=0o700, exist_ok=True)
        os.chmod(parent, 0o700)
        if target.exists():  # a rotation that stopped before writing its keyring, or a keyring.json gone missing
            raise EvidenceError(
                ReasonCode.KEY_MATERIAL_INVALID,
                f"{GENERATIONS}/{number:06d} exists but the keyring does not list it: check "
                "keyring.json against the archive's newest keys/keyring-*.json, then move it away",
            )
        staging = parent / f".staging-{uuid.uuid4().hex}"
        staging.mkdir(mode=0o700)
        try:
            write_generation(staging, root_key, self.keyring(1).root_certificate, now(), template)
            os.rename(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self._keyrings.pop(number, None)
        return self.keyring(number)

    def _write(self, document: KeyringDocument, root_key: CertificateIssuerPrivateKeyTypes) -> None:
        """Sign ``document``, make it keyring.json (atomically, 0600) and publish it: the caller holds the lock."""
        envelope = document.sign(root_key)
        staging = self.home / f".{STATE}.{uuid.uuid4().hex}"
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(envelope)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(staging, self.home / STATE)
        finally:
            staging.unlink(missing_ok=True)
        directory = os.open(self.home, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        self._refresh()


def _generation(keyring: Keyring, not_before: datetime) -> Generation:
    raw = keyring.statement_public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return Generation(
        generation=keyring.generation,
        statement_key_id=keyring.statement_key_id,
        statement_public_key=raw.hex(),
        signer_certificate_id=keyring.signer_certificate_id,
        not_before=not_before,
    )


def describe(document: KeyringDocument) -> list[str]:
    """One line per generation, newest first, for `evidence keys list|rotate|revoke`."""
    lines = []
    for g in reversed(document.generations):
        window = f"{g.not_before.isoformat(timespec='seconds')} .. " + (
            g.not_after.isoformat(timespec="seconds") if g.not_after else "now"
        )
        revoked = (
            f", revoked at {g.revoked_at.isoformat(timespec='seconds')}: {g.revocation_reason}" if g.revoked_at else ""
        )
        lines.append(
            f"generation {g.generation}  {g.status:<8} {g.statement_key_id}  {g.signer_certificate_id}  "
            f"{window}{revoked}"
        )
    return lines
