"""The demo's development actors: an admin, an approver and an operator, each with its own key under
$EVIDENCE_HOME/actors/<name>.pem (0600, in a 0700 folder), registered once per home and reused by every later demo.

The first demo bootstraps `dev-admin` (the install-time bootstrap, recorded like any other) and has it register
`dev-approver` and `dev-operator`; the demo's template versions are then submitted by the operator and approved by
the approver, through the same signed requests and action gate as `evidence template submit` / `approve`. These are
development identities: a production deployment bootstraps its own admin and never runs the demo.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline.actors.admin import ActorAdmin
from evidence_pipeline.actors.authorize import ActionGate
from evidence_pipeline.actors.keyfiles import generate_actor_key, load_actor_key, public_hex, service_key_ids
from evidence_pipeline.actors.registry import Registry
from evidence_pipeline.actors.requests import sign_request
from evidence_pipeline.actors.roles import Action, Role
from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger.actors import ActorLedger
from evidence_pipeline.paths import private_dirs

ADMIN, APPROVER, OPERATOR = "dev-admin", "dev-approver", "dev-operator"
DEV_ROLES = {ADMIN: Role.ADMIN.value, APPROVER: Role.APPROVER.value, OPERATOR: Role.OPERATOR.value}


def key_path(settings: Settings, name: str) -> Path:
    return settings.home / "actors" / f"{name}.pem"


@dataclass(frozen=True)
class DemoActors:
    gate: ActionGate
    keys: dict[str, ed25519.Ed25519PrivateKey]

    def sign(self, name: str, action: Action, args: dict, tenant: str | None = None) -> dict:
        return sign_request(self.keys[name], name, action, args=args, tenant=tenant)


def ensure_demo_actors(settings: Settings, actors: ActorLedger) -> DemoActors:
    """The dev actors, their keys generated and registered the first time (module docstring). Concurrent demos
    on one home take turns (a lock file beside the keys)."""
    gate = ActionGate(actors, settings.action_max_age_seconds)
    with _locked(settings.home / "actors"):
        keys = {name: _key(settings, name) for name in DEV_ROLES}
        actors = DemoActors(gate, keys)
        admin = ActorAdmin(gate, service_key_ids(settings))
        registry = Registry(gate.actors.read_snapshot())
        if registry.roles(ADMIN) is None:
            if registry.bootstrapped:
                raise EvidenceError(
                    ReasonCode.ACTOR_ALREADY_BOOTSTRAPPED,
                    "this deployment has its own first admin: the demo's actors are not made",
                )
            public = public_hex(keys[ADMIN])
            admin.bootstrap(actors.sign(ADMIN, Action.ACTOR_BOOTSTRAP, {"name": ADMIN, "public_key": public}), public)
        for name in (APPROVER, OPERATOR):
            if registry.roles(name) is None:
                admin.register(
                    actors.sign(
                        ADMIN,
                        Action.ACTOR_REGISTER,
                        {"name": name, "roles": [DEV_ROLES[name]], "public_key": public_hex(keys[name])},
                    )
                )
    return actors


def _key(settings: Settings, name: str) -> ed25519.Ed25519PrivateKey:
    path = key_path(settings, name)
    return load_actor_key(path, settings) if path.exists() else generate_actor_key(path)


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    private_dirs(folder)
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
