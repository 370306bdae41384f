"""Test actors that sign: a ledger's actor registry with a bootstrapped admin `root`, an operator `olga`, an
approver `bob` and an auditor `audrey`. Domain tests sign with ``sign`` (``signers_of`` keeps one registry per
ledger); command-line tests give a folder, where each actor's key is a file `<name>.pem` (0600), and pass
``--key`` (the actor's name is the file's)."""

from __future__ import annotations

import base64
import hashlib
import weakref
from datetime import datetime
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from evidence_pipeline.actors.admin import ActorAdmin
from evidence_pipeline.actors.authorize import ActionGate
from evidence_pipeline.actors.keyfiles import generate_actor_key, public_hex
from evidence_pipeline.actors.requests import sign_request
from evidence_pipeline.actors.roles import Action
from evidence_pipeline.config import Settings
from evidence_pipeline.documents import templates
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.ledger.rows import Job
from evidence_pipeline.paths import private_dirs
from evidence_pipeline.tempfiles import write_private
from evidence_pipeline_tests.support.pieces import pieces_of

ACTORS = {"olga": ["operator"], "bob": ["approver"], "audrey": ["auditor"]}


class Signers:
    def __init__(self, ledger: Ledger, folder: Path | None = None, max_age_seconds: float = 300):
        self.gate = ActionGate(pieces_of(ledger).actors, max_age_seconds)  # a bare ledger's: tests of the ledger alone
        self.admin = ActorAdmin(self.gate)
        self.folder = folder
        known = _known(ledger)
        if known is not None:  # a deployment has one first admin: these are the database's actors, their keys
            self.keys = known.keys
            for name in list(self.keys) if folder is not None else ():
                self.key_file_in(folder, name)
        else:
            self.keys: dict[str, Ed25519PrivateKey] = {}
            self._key("root")
            public = public_hex(self.keys["root"])
            self.admin.bootstrap(
                self.sign("root", Action.ACTOR_BOOTSTRAP, {"name": "root", "public_key": public}), public
            )
            for name, roles in ACTORS.items():
                self.register(name, roles)
        _registries[ledger] = self  # signers_of(ledger) and admin_key_file find these actors

    def register(self, name: str, roles: list[str], key: Ed25519PrivateKey | None = None) -> None:
        """``name`` with ``roles``; with ``key``, another name on that key (one identity, no key file)."""
        if key is None:
            key = self._key(name)
        self.keys[name] = key
        self.admin.register(
            self.sign("root", Action.ACTOR_REGISTER, {"name": name, "roles": roles, "public_key": public_hex(key)})
        )

    def ensure(self, name: str, roles: list[str]) -> None:
        if name not in self.keys:
            self.register(name, roles)

    def sign(self, actor: str, action: Action, args: dict, tenant: str | None = None) -> dict:
        return sign_request(self.keys[actor], actor, action, args=args, tenant=tenant)

    def replay(self, job_id: str, reason: str, actor: str = "olga", policy_version: str | None = None) -> Job:
        """What `evidence replay` does, signed by ``actor``."""
        from evidence_pipeline.operations.replay import replay_job

        args = {"job_id": job_id, "reason": reason} | ({"policy_version": policy_version} if policy_version else {})
        return replay_job(self.gate, self.sign(actor, Action.JOB_REPLAY, args))

    def submit_template(
        self,
        tenant: str,
        organization: bytes,
        program: bytes,
        actor: str = "olga",
        effective_at: datetime | None = None,
    ) -> tuple[dict, bool]:
        """What `evidence template submit` does, signed by ``actor``."""
        vid = templates.version_id(
            templates.merge(templates.parse(organization, "organization"), templates.parse(program, "program"))
        )
        effective = (effective_at or datetime.now().astimezone()).isoformat(timespec="seconds")
        return templates.submit(
            self.gate,
            self.sign(actor, Action.TEMPLATE_SUBMIT, {"version_id": vid, "effective_at": effective}, tenant=tenant),
            organization,
            program,
        )

    def approve_template(self, tenant: str, version_id: str, actor: str = "bob") -> tuple[dict, bool]:
        return templates.approve(
            self.gate, self.sign(actor, Action.TEMPLATE_APPROVE, {"version_id": version_id}, tenant=tenant)
        )

    def register_tenants(self, tenants: list[str], actor: str = "olga") -> dict[str, str]:
        """What `evidence tenant add` does, signed by ``actor``."""
        from evidence_pipeline.operations.tenant_access import register_tenants

        return register_tenants(
            self.gate,
            pieces_of(self.gate.ledger).tenants,
            self.sign(actor, Action.TENANT_REGISTER, {"tenants": tenants}),
        )

    def issue_token(self, tenant: str, actor: str = "olga") -> str:
        """What `evidence tenant add` (if it was not run before) and `evidence tenant token issue` do, signed by
        ``actor``: the token."""
        from evidence_pipeline.operations.tenant_access import issue_token

        self.register_tenants([tenant], actor)
        return issue_token(
            self.gate, pieces_of(self.gate.ledger).tokens, self.sign(actor, Action.TOKEN_ISSUE, {}, tenant=tenant)
        )[2]

    def key_file(self, name: str) -> str:
        return str(self.folder / f"{name}.pem")

    def key_file_in(self, folder: Path, name: str) -> str:
        """``name``'s key as a file in ``folder`` (0600), written once: for a command line to sign with."""
        path = folder / f"{name}.pem"
        if not path.exists():
            private_dirs(folder)
            write_private(
                path,
                self.keys[name].private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                ),
            )
        return str(path)

    def _key(self, name: str) -> Ed25519PrivateKey:
        self.keys[name] = (
            Ed25519PrivateKey.generate() if self.folder is None else generate_actor_key(self.folder / f"{name}.pem")
        )
        return self.keys[name]


def admin_key_file(env: dict[str, str] | None = None) -> str:
    """The key file of the admin `root` of the ledger that ``env`` (else the environment) names (its test actors:
    signers_of), written beside EVIDENCE_HOME: what `evidence keys rotate` and `revoke` sign with."""
    settings = Settings.from_env(env)
    ledger = Ledger(settings.ledger_url)
    folder = settings.home.parent / f"actors-{hashlib.sha256(_database(ledger).encode()).hexdigest()[:12]}"
    return signers_of(ledger).key_file_in(folder, "root")


_registries: weakref.WeakKeyDictionary[Ledger, Signers] = weakref.WeakKeyDictionary()


def signers_of(ledger: Ledger) -> Signers:
    """The test actors of ``ledger``'s database, bootstrapped on first use, whichever Ledger object opens it: a
    deployment has one first admin."""
    if ledger not in _registries:
        _registries[ledger] = _known(ledger) or Signers(ledger)
    return _registries[ledger]


def _known(ledger: Ledger) -> Signers | None:
    """The test actors of ``ledger``'s database, if some Ledger object on it made them."""
    database = _database(ledger)
    return next((signers for other, signers in list(_registries.items()) if _database(other) == database), None)


def _database(ledger: Ledger) -> str:
    return ledger.engine.url.render_as_string(hide_password=False)


def request_text(envelope: dict) -> str:
    """The signed request's text inside an envelope (its DSSE payload)."""
    return base64.b64decode(envelope["payload"]).decode()


def with_text(envelope: dict, text: str) -> dict:
    """The envelope carrying ``text`` in place of what was signed (its signature left as it is)."""
    return {**envelope, "payload": base64.b64encode(text.encode()).decode()}


def with_signature(envelope: dict, signature: str) -> dict:
    """The envelope with its one signature's ``sig`` replaced (base64 text)."""
    return {**envelope, "signatures": [{**envelope["signatures"][0], "sig": signature}]}


def signature_of(envelope: dict) -> str:
    return envelope["signatures"][0]["sig"]
