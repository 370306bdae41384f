"""Who acts (issue 30, the domain core): actors with keys and roles registered by signed ledger events, the gate
that authorizes a signed request and records each refusal, four-eyes between identities, and the auditor's offline
re-check from events alone. The ledger tests run on both backends (SQLite, PostgreSQL)."""

from __future__ import annotations

import base64
import copy
import json
import os
import threading
from datetime import datetime, timedelta, timezone

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from sqlalchemy import select, text

from evidence_pipeline import jsonread
from evidence_pipeline.actors.admin import ActorAdmin
from evidence_pipeline.actors.authorize import ActionGate
from evidence_pipeline.actors.keyfiles import generate_actor_key, load_actor_key, public_hex, service_key_ids
from evidence_pipeline.actors.offline import recheck_events
from evidence_pipeline.actors.registry import Registry
from evidence_pipeline.actors.requests import (
    ACTION_PAYLOAD_TYPE,
    digest,
    envelope_of,
    key_id,
    recorded,
    request_time,
    sealed,
    sign_request,
)
from evidence_pipeline.actors.roles import PERMISSIONS, Action, Role, permits, roles_table
from evidence_pipeline.actors.verify import ActionRefused
from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.ledger.actors import TABLES
from evidence_pipeline.ledger.ledger import event_body
from evidence_pipeline.models import ActorKeyState, ActorState, EventType
from evidence_pipeline.runtime import runtime_for
from evidence_pipeline.signing.dsse import canonical_json, pae
from evidence_pipeline.signing.keys import STATEMENT_KEY, load_keyring
from evidence_pipeline_tests.support.fixture_sources import SMALL
from evidence_pipeline_tests.support.pieces import pieces_of
from evidence_pipeline_tests.support.signers import request_text, signature_of, with_signature, with_text
from evidence_pipeline_tests.support.tampering import drop_append_only_guards

MAX_AGE = 300


class World:
    """A ledger with a bootstrapped admin `root` and an operator `olga`; each actor's key in ``keys``."""

    def __init__(self, backend: dict[str, str]):
        self.ledger = Ledger(Settings.from_env(backend).ledger_url)
        self.gate = ActionGate(pieces_of(self.ledger).actors, MAX_AGE)
        self.admin = ActorAdmin(self.gate)
        self.keys: dict[str, Ed25519PrivateKey] = {}

    def sign(self, actor: str, action: Action, args: dict, key: Ed25519PrivateKey | None = None, **options) -> dict:
        return sign_request(key or self.keys[actor], actor, action, args=args, **options)

    def bootstrap(self, name: str = "root"):
        self.keys[name] = Ed25519PrivateKey.generate()
        public = public_hex(self.keys[name])
        return self.admin.bootstrap(
            self.sign(name, Action.ACTOR_BOOTSTRAP, {"name": name, "public_key": public}), public
        )

    def register(self, name: str, roles: list[str], by: str = "root", key: Ed25519PrivateKey | None = None):
        self.keys.setdefault(name, key or Ed25519PrivateKey.generate())
        return self.admin.register(
            self.sign(
                by, Action.ACTOR_REGISTER, {"name": name, "roles": roles, "public_key": public_hex(self.keys[name])}
            )
        )

    def registry(self) -> Registry:
        return Registry(pieces_of(self.ledger).actors.read_snapshot())

    def bodies(self) -> list[dict]:
        events = self.ledger.audit_events.c
        with self.ledger.engine.connect() as conn:
            return [event_body(body) for body in conn.execute(select(events.body).order_by(events.seq)).scalars()]

    def last(self) -> dict:
        return self.bodies()[-1]


@pytest.fixture
def world(backend) -> World:
    world = World(backend)
    world.bootstrap()
    world.register("olga", ["operator"])
    return world


def _refused(call, code: str) -> ActionRefused:
    with pytest.raises(ActionRefused) as refused:
        call()
    assert refused.value.code == code
    return refused.value


def _forged(signer: Ed25519PrivateKey, named_key_id: str, actor: str, action: Action, args: dict) -> dict:
    """A request that names one key and is signed by another."""
    body = {
        "action": str(action),
        "actor": actor,
        "args": args,
        "key_id": named_key_id,
        "nonce": "n" * 24,
        "time": request_time(datetime.now(timezone.utc)),
    }
    text_ = canonical_json(body).decode()
    return envelope_of(text_, named_key_id, signer.sign(pae(ACTION_PAYLOAD_TYPE, text_.encode())))


# The request format and the roles table: pure functions


def test_a_signed_request_is_canonical_json_signed_over_its_dsse_encoding():
    key = Ed25519PrivateKey.generate()
    envelope = sign_request(
        key, "alice", Action.JOB_REPLAY, args={"job_id": "j1", "reason": "fixed"}, tenant="acme-books"
    )
    assert envelope.keys() == {"payloadType", "payload", "signatures"}
    assert envelope["payloadType"] == ACTION_PAYLOAD_TYPE
    closed = sealed(json.dumps(envelope))
    assert closed.key_id == envelope["signatures"][0]["keyid"] == key_id(key.public_key())  # outside the text
    assert closed.verifies(key.public_key()) and not closed.verifies(Ed25519PrivateKey.generate().public_key())
    request = closed.opened()
    assert request_text(envelope) == request.text == canonical_json(json.loads(request.text)).decode()
    assert request.body.keys() == {"action", "actor", "args", "key_id", "nonce", "time", "tenant"}
    assert request.key_id == key_id(key.public_key()) and len(request.key_id) == 64
    assert request.envelope == envelope
    # A signature over the bare text (not the DSSE encoding with the action payload type) does not verify.
    bare = with_signature(envelope, base64.b64encode(key.sign(request.text.encode())).decode())
    assert not sealed(bare).verifies(key.public_key())


def _opened(raw: object):
    return sealed(raw).opened()


@pytest.mark.parametrize(
    "change, code",
    [
        (lambda e: None, "ACTION_UNSIGNED"),
        (lambda e: {"payloadType": e["payloadType"], "payload": e["payload"]}, "ACTION_UNSIGNED"),
        (lambda e: {**e, "signatures": []}, "ACTION_UNSIGNED"),
        (lambda e: with_signature(e, "not base64!"), "ACTION_SIGNATURE_INVALID"),
        (lambda e: with_signature(e, base64.b64encode(b"short").decode()), "ACTION_SIGNATURE_INVALID"),
        (lambda e: "{not json", "ACTION_REQUEST_INVALID"),
        (lambda e: {**e, "extra": 1}, "ACTION_REQUEST_INVALID"),
        (lambda e: {**e, "payloadType": "application/vnd.in-toto+json"}, "ACTION_REQUEST_INVALID"),
        (lambda e: {**e, "signatures": e["signatures"] * 2}, "ACTION_REQUEST_INVALID"),
        (lambda e: {**e, "signatures": [{**e["signatures"][0], "keyid": "alice"}]}, "ACTION_REQUEST_INVALID"),
        (lambda e: {**e, "payload": "not base64!"}, "ACTION_REQUEST_INVALID"),
        (lambda e: {"request": request_text(e), "signature": signature_of(e)}, "ACTION_REQUEST_INVALID"),  # old form
        (lambda e: with_text(e, request_text(e).replace(",", ", ")), "ACTION_REQUEST_INVALID"),  # not canonical
        (lambda e: with_text(e, request_text(e).replace('"time"', '"when"')), "ACTION_REQUEST_INVALID"),
        (lambda e: with_text(e, request_text(e).replace("alice", "Alice!")), "ACTION_REQUEST_INVALID"),
        (
            lambda e: with_text(e, request_text(e).replace(e["signatures"][0]["keyid"], "0" * 64)),
            "ACTION_REQUEST_INVALID",
        ),  # the text names another key than the envelope
    ],
    ids=[
        "none",
        "no-signature",
        "empty-signatures",
        "signature-not-base64",
        "signature-short",
        "not-json",
        "extra-field",
        "other-payload-type",
        "two-signatures",
        "keyid-not-a-key-id",
        "payload-not-base64",
        "old-form",
        "not-canonical",
        "field-renamed",
        "actor-not-a-slug",
        "other-key-id",
    ],
)
def test_a_request_that_breaks_the_format_is_refused_with_its_code(change, code):
    envelope = sign_request(Ed25519PrivateKey.generate(), "alice", Action.JOB_REPLAY, args={"job_id": "j1"})
    with pytest.raises(EvidenceError) as error:
        _opened(change(envelope))
    assert error.value.code == code


def test_the_roles_table_is_the_permissions():
    table = roles_table()
    for action in Action:
        row = next(line for line in table.splitlines() if line.startswith(f"| `{action}` |"))
        assert row.count("| yes ") == sum(action in PERMISSIONS[role] for role in Role)
    assert PERMISSIONS[Role.AUDITOR] == {Action.JOBS_READ}  # read-only
    assert not any(Action.ACTOR_BOOTSTRAP in actions for actions in PERMISSIONS.values())  # only the bootstrap path
    assert permits(frozenset({"reviewer", "auditor"}), Action.PART_DECIDE)
    assert not permits(frozenset({"admin"}), Action.JOB_REPLAY)  # roles do not nest: an admin is not an operator


def _key_id_of(public: str) -> str:
    return key_id(Ed25519PublicKey.from_public_bytes(bytes.fromhex(public)))


def test_two_names_on_one_key_are_one_identity():
    shared, other = public_hex(Ed25519PrivateKey.generate()), public_hex(Ed25519PrivateKey.generate())

    def key(public: str) -> dict:
        return {_key_id_of(public): ActorKeyState(public, "2026-01-01T00:00:00+00:00", None)}

    registry = Registry(
        {
            "bob": ActorState(("approver",), key(shared)),
            "bob-ops": ActorState(("operator",), key(shared)),
            "olga": ActorState(("operator",), key(other)),
        }
    )
    assert registry.same_identity("bob", "bob-ops") and registry.same_identity("olga", "olga")
    assert not registry.same_identity("bob", "olga")
    with pytest.raises(EvidenceError) as error:
        registry.require_other_identity("bob-ops", "bob")
    assert error.value.code == "FOUR_EYES_REQUIRED"
    registry.require_other_identity("olga", "bob")


# The registry in the ledger: bootstrap once, every change a signed event


def test_the_first_admin_is_bootstrapped_once(backend):
    world = World(backend)
    world.keys["nobody"] = Ed25519PrivateKey.generate()
    _refused(lambda: world.register("early", ["admin"], by="nobody"), "ACTOR_UNKNOWN")  # no registry yet
    event = world.bootstrap()
    assert event.body["event_type"] == "actor.bootstrapped" and event.body["actor"] == "root"
    assert event.body["tenant"] == "" and event.body["details"]["roles"] == ["admin"]
    assert event.body["details"]["key"]["key_id"] == key_id(world.keys["root"].public_key())
    mallory = Ed25519PrivateKey.generate()
    second = sign_request(
        mallory, "mallory", Action.ACTOR_BOOTSTRAP, args={"name": "mallory", "public_key": public_hex(mallory)}
    )
    _refused(lambda: world.admin.bootstrap(second, public_hex(mallory)), "ACTOR_ALREADY_BOOTSTRAPPED")
    refusal = world.last()
    assert refusal["event_type"] == "action.refused" and refusal["actor"] == ""
    assert refusal["details"] == {
        "code": "ACTOR_ALREADY_BOOTSTRAPPED",
        "action": "actor.bootstrap",
        "request_sha256": digest(second),
    }  # self-signed: not an identity, no content
    assert "mallory" not in json.dumps(refusal)
    assert set(world.registry().snapshot()) == {"root"}
    assert world.ledger.verify_chain() == len(world.bodies())


def test_registering_changing_roles_adding_and_revoking_keys_are_signed_events(world):
    world.register("alice", ["operator"])
    world.admin.change_roles(
        world.sign("root", Action.ACTOR_ROLES, {"name": "alice", "roles": ["approver", "operator"]})
    )
    second = Ed25519PrivateKey.generate()
    world.admin.add_key(world.sign("root", Action.ACTOR_KEY_ADD, {"name": "alice", "public_key": public_hex(second)}))
    first_id = key_id(world.keys["alice"].public_key())
    world.admin.revoke_key(world.sign("root", Action.ACTOR_KEY_REVOKE, {"name": "alice", "key_id": first_id}))

    bodies = world.bodies()
    assert [body["event_type"] for body in bodies] == [
        "actor.bootstrapped",
        "actor.registered",
        "actor.registered",
        "actor.roles_changed",
        "actor.key_added",
        "actor.key_revoked",
    ]
    for body in bodies[1:]:
        request = recorded(body["details"]["authorization"])
        assert body["actor"] == request.actor == "root"
        assert sealed(body["details"]["authorization"]).verifies(world.keys["root"].public_key())
    alice = world.registry().snapshot()["alice"]
    assert alice.roles == ("approver", "operator")
    assert alice.keys[first_id].revoked_at == bodies[-1]["details"]["revoked_at"]
    assert alice.keys[key_id(second.public_key())].revoked_at is None
    # The tables are a projection of the events: an auditor folding the events alone gets the same registry.
    assert Registry.from_events(bodies).snapshot() == world.registry().snapshot()
    assert world.ledger.verify_chain() == len(bodies)
    with world.ledger.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM evidence_action_nonces")).scalar() == len(bodies)


def test_the_actor_tables_are_append_only(world):
    olga = key_id(world.keys["olga"].public_key())  # a revocation, so that every table has a row to refuse
    world.admin.revoke_key(world.sign("root", Action.ACTOR_KEY_REVOKE, {"name": "olga", "key_id": olga}))
    for table in TABLES:
        with pytest.raises(Exception, match="LEDGER_APPEND_ONLY"), world.ledger.engine.begin() as conn:
            conn.execute(text(f"DELETE FROM {table}"))
    with pytest.raises(Exception, match="LEDGER_APPEND_ONLY"), world.ledger.engine.begin() as conn:
        conn.execute(text("UPDATE evidence_actor_roles SET roles = '[\"admin\"]'"))


def test_no_change_leaves_the_deployment_without_an_admin(world):
    root_key = key_id(world.keys["root"].public_key())
    _refused_domain = [
        lambda: world.admin.revoke_key(
            world.sign("root", Action.ACTOR_KEY_REVOKE, {"name": "root", "key_id": root_key})
        ),
        lambda: world.admin.change_roles(
            world.sign("root", Action.ACTOR_ROLES, {"name": "root", "roles": ["operator"]})
        ),
    ]
    for call in _refused_domain:
        with pytest.raises(EvidenceError) as error:
            call()
        assert error.value.code == "ACTOR_LAST_ADMIN"
    world.register("ada", ["admin"])  # with a second admin, root may step down
    world.admin.change_roles(world.sign("root", Action.ACTOR_ROLES, {"name": "root", "roles": ["auditor"]}))
    assert world.registry().roles("root") == {"auditor"}


# The gate: every refusal has its code, changes nothing and is recorded


def _unsigned(world: World) -> object:
    return None


def _garbled_signature(world: World) -> object:
    envelope = world.sign("root", Action.ACTOR_REGISTER, _newbie())
    return with_signature(envelope, base64.b64encode(os.urandom(64)).decode())


def _garbled_request(world: World) -> object:
    envelope = world.sign("root", Action.ACTOR_REGISTER, _newbie())
    return with_text(envelope, request_text(envelope).replace('"operator"', '"admin"'))


def _not_json(world: World) -> object:
    return b"\x00 newbie garbage"


def _wrong_key(world: World) -> object:
    return _forged(
        Ed25519PrivateKey.generate(), key_id(world.keys["root"].public_key()), "root", Action.ACTOR_REGISTER, _newbie()
    )


def _unknown_actor(world: World) -> object:
    return sign_request(Ed25519PrivateKey.generate(), "nobody", Action.ACTOR_REGISTER, args=_newbie())


def _another_actors_key(world: World) -> object:
    return sign_request(world.keys["olga"], "root", Action.ACTOR_REGISTER, args=_newbie())  # olga claims to be root


def _wrong_role(world: World) -> object:
    return world.sign("olga", Action.ACTOR_REGISTER, _newbie())


def _too_old(world: World) -> object:
    return world.sign(
        "root", Action.ACTOR_REGISTER, _newbie(), now=datetime.now(timezone.utc) - timedelta(seconds=MAX_AGE + 60)
    )


def _from_the_future(world: World) -> object:
    return world.sign(
        "root", Action.ACTOR_REGISTER, _newbie(), now=datetime.now(timezone.utc) + timedelta(seconds=MAX_AGE + 60)
    )


def _for_another_action(world: World) -> object:
    return world.sign("root", Action.ACTOR_ROLES, _newbie())


def _replayed(world: World) -> object:
    envelope = world.sign("root", Action.ACTOR_REGISTER, {**_newbie(), "name": "first-use"})
    world.admin.register(envelope)
    return envelope


def _newbie() -> dict:
    return {"name": "newbie", "roles": ["operator"], "public_key": public_hex(Ed25519PrivateKey.generate())}


@pytest.mark.parametrize(
    "make, code, authenticated",
    [
        (_unsigned, "ACTION_UNSIGNED", False),
        (_garbled_signature, "ACTION_SIGNATURE_INVALID", False),
        (_garbled_request, "ACTION_SIGNATURE_INVALID", False),
        (_not_json, "ACTION_REQUEST_INVALID", False),
        (_wrong_key, "ACTION_SIGNATURE_INVALID", False),
        (_unknown_actor, "ACTOR_UNKNOWN", False),
        (_another_actors_key, "ACTOR_UNKNOWN", False),
        (_wrong_role, "ACTION_FORBIDDEN", True),
        (_too_old, "ACTION_EXPIRED", True),
        (_from_the_future, "ACTION_EXPIRED", True),
        (_for_another_action, "ACTION_REQUEST_INVALID", True),
        (_replayed, "ACTION_REPLAYED", True),
    ],
    ids=lambda value: value.__name__.strip("_") if callable(value) else None,
)
def test_a_refused_request_changes_nothing_and_is_recorded(world, make, code, authenticated):
    raw = make(world)
    before = world.registry().snapshot()
    _refused(lambda: world.admin.register(raw), code)
    assert world.registry().snapshot() == before
    refusal = world.last()
    assert refusal["event_type"] == "action.refused" and refusal["tenant"] == ""
    assert refusal["details"]["code"] == code and refusal["details"]["action"] == "actor.register"
    assert refusal["details"]["request_sha256"] == refusal["subject_sha256"] == digest(raw)
    if authenticated:  # the request is kept as evidence, under its actor, and its nonce can never act later
        request = recorded(raw)
        assert refusal["actor"] == request.actor and refusal["details"]["authorization"] == raw
        with world.ledger.engine.connect() as conn:
            assert (
                conn.execute(
                    text("SELECT count(*) FROM evidence_action_nonces WHERE nonce = :nonce"), {"nonce": request.nonce}
                ).scalar()
                == 1
            )
    else:  # nothing of an unauthenticated request is written, only its digest
        assert refusal["actor"] == "" and refusal["details"].keys() == {"code", "action", "request_sha256"}
        assert "newbie" not in json.dumps(refusal)
    assert world.ledger.verify_chain() == len(world.bodies())


def test_a_refused_request_never_acts_later(world):
    """Its nonce was consumed with the refusal: granting the missing role afterwards does not revive it."""
    forbidden = world.sign("olga", Action.ACTOR_REGISTER, _newbie())
    _refused(lambda: world.admin.register(forbidden), "ACTION_FORBIDDEN")
    world.admin.change_roles(world.sign("root", Action.ACTOR_ROLES, {"name": "olga", "roles": ["admin"]}))
    _refused(lambda: world.admin.register(forbidden), "ACTION_REPLAYED")
    world.admin.register(world.sign("olga", Action.ACTOR_REGISTER, _newbie()))  # a new request acts


def test_a_revoked_key_authorized_what_came_before_its_revocation_and_nothing_after(world):
    world.register("ada", ["admin"])
    first = world.keys["ada"]
    second = Ed25519PrivateKey.generate()
    world.admin.add_key(world.sign("root", Action.ACTOR_KEY_ADD, {"name": "ada", "public_key": public_hex(second)}))
    before = world.admin.register(
        world.sign(
            "ada",
            Action.ACTOR_REGISTER,
            {"name": "bea", "roles": ["auditor"], "public_key": public_hex(Ed25519PrivateKey.generate())},
        )
    )
    signed_early = world.sign(
        "ada",
        Action.ACTOR_REGISTER,
        {  # signed before the revocation, sent after it
            "name": "cid",
            "roles": ["auditor"],
            "public_key": public_hex(Ed25519PrivateKey.generate()),
        },
    )
    world.admin.revoke_key(
        world.sign("root", Action.ACTOR_KEY_REVOKE, {"name": "ada", "key_id": key_id(first.public_key())})
    )
    _refused(lambda: world.admin.register(signed_early), "ACTOR_KEY_REVOKED")
    _refused(
        lambda: world.admin.register(
            world.sign(
                "ada",
                Action.ACTOR_REGISTER,
                {"name": "cid", "roles": ["auditor"], "public_key": public_hex(Ed25519PrivateKey.generate())},
            )
        ),
        "ACTOR_KEY_REVOKED",
    )
    world.admin.register(
        world.sign(
            "ada",
            Action.ACTOR_REGISTER,
            {  # her other key still acts
                "name": "cid",
                "roles": ["auditor"],
                "public_key": public_hex(Ed25519PrivateKey.generate()),
            },
            key=second,
        )
    )
    with pytest.raises(EvidenceError) as again:
        world.admin.revoke_key(
            world.sign("root", Action.ACTOR_KEY_REVOKE, {"name": "ada", "key_id": key_id(first.public_key())})
        )
    assert again.value.code == "ACTOR_KEY_REVOKED"
    # Offline, the event the first key authorized before its revocation still checks.
    authorized = {found.event_id: found for found in recheck_events(world.bodies())}
    assert authorized[before.body["event_id"]].key_id == key_id(first.public_key())
    assert set(world.registry().snapshot()) == {"root", "olga", "ada", "bea", "cid"}


def test_one_request_acts_once_even_when_sent_concurrently(world):
    envelope = world.sign("root", Action.ACTOR_REGISTER, _newbie())
    outcomes: list[str] = []

    def send():
        try:
            world.admin.register(envelope)
            outcomes.append("ok")
        except EvidenceError as error:
            outcomes.append(error.code)

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["ACTION_REPLAYED"] * 3 + ["ok"]
    assert [body["event_type"] for body in world.bodies()].count("actor.registered") == 2  # olga, newbie


def test_four_eyes_is_between_identities_and_its_refusal_is_recorded(world):
    shared = Ed25519PrivateKey.generate()
    world.register("bob", ["approver"], key=shared)
    world.register("bob-ops", ["operator"], key=shared)  # a second name on the same key
    registry = world.registry()
    assert registry.same_identity("bob", "bob-ops") and not registry.same_identity("bob", "olga")

    def approve(author: str):
        def perform(conn, registry, authorized):
            registry.require_other_identity(author, authorized.actor)
            return world.ledger._append(
                conn,
                SMALL,
                EventType.TEMPLATE_APPROVED,
                "0" * 64,
                actor=authorized.actor,
                details={"author": author, "authorization": authorized.envelope},
            )

        return lambda: world.gate.run(
            world.sign("bob", Action.TEMPLATE_APPROVE, {"version": "v1"}, tenant=SMALL.tenant),
            Action.TEMPLATE_APPROVE,
            perform,
        )

    _refused(approve("bob-ops"), "FOUR_EYES_REQUIRED")
    refusal = world.last()
    assert refusal["event_type"] == "action.refused" and refusal["actor"] == "bob"
    assert refusal["details"]["code"] == "FOUR_EYES_REQUIRED" and "authorization" in refusal["details"]
    event = approve("olga")()
    assert event.body["event_type"] == "template.approved" and event.body["tenant"] == SMALL.tenant
    assert recheck_events(world.bodies())[-1].actor == "bob"


# The auditor's offline re-check, from events alone


def test_the_offline_recheck_finds_who_authorized_each_event_and_any_tampering(world):
    world.register("alice", ["operator"])
    bodies = world.bodies()
    found = recheck_events(bodies)
    assert [(f.event_type, f.actor, f.action) for f in found] == [
        ("actor.bootstrapped", "root", "actor.bootstrap"),
        ("actor.registered", "root", "actor.register"),
        ("actor.registered", "root", "actor.register"),
    ]
    assert found[-1].key_id == key_id(world.keys["root"].public_key())

    def tampered(index: int, change) -> list[dict]:
        copies = copy.deepcopy(bodies)
        change(copies[index])
        return copies

    def rewritten(body: dict) -> None:
        authorization = body["details"]["authorization"]
        body["details"]["authorization"] = with_text(
            authorization, request_text(authorization).replace('"operator"', '"admin"')
        )

    cases = {
        "request": (tampered(2, rewritten), "ACTION_SIGNATURE_INVALID"),
        "details": (tampered(2, lambda body: body["details"].update(roles=["admin"])), "ACTION_REQUEST_INVALID"),
        "actor": (tampered(2, lambda body: body.update(actor="olga")), "ACTION_REQUEST_INVALID"),
        "late": (tampered(2, lambda body: body.update(recorded_at="2099-01-01T00:00:00+00:00")), "ACTION_EXPIRED"),
        "copied": (bodies + [copy.deepcopy(bodies[2])], "ACTION_REPLAYED"),
        "no-bootstrap": (bodies[1:], "ACTOR_UNKNOWN"),  # root's events without the event that made root
    }
    for name, (events, code) in cases.items():
        with pytest.raises(EvidenceError) as error:
            recheck_events(events)
        assert error.value.code == "LEDGER_INVALID" and code in error.value.message, name
    unsigned = tampered(2, lambda body: body["details"].pop("authorization"))
    with pytest.raises(EvidenceError, match="without its signed request"):
        recheck_events(unsigned)


def test_a_request_is_verified_before_its_text_is_parsed(world, monkeypatch):
    """The key is named outside the signed bytes: a text too deep to read, under a signature that does not verify
    or by a key nobody registered, is refused for its signature and never handed to the JSON reader; signed
    properly by a registered key, the same text is the request's problem."""
    deep = "[" * 20000 + "]" * 20000  # its envelope still within MAX_ENVELOPE_BYTES
    read = []
    loads = jsonread.loads
    monkeypatch.setattr(jsonread, "loads", lambda data, *rest: read.append(data) or loads(data, *rest))
    root = world.keys["root"]
    stranger = Ed25519PrivateKey.generate()
    forged = _signed_text(stranger, deep, key_id(root.public_key()))  # names root's key, signed by another
    unknown = _signed_text(stranger, deep, key_id(stranger.public_key()))
    for raw, code in ((forged, "ACTION_SIGNATURE_INVALID"), (unknown, "ACTOR_UNKNOWN")):
        _refused(lambda: world.admin.register(raw), code)
        _refused(lambda: world.admin.register(json.dumps(raw)), code)  # as text: only the envelope is read
    assert read and not any(deep in (data if isinstance(data, str) else data.decode()) for data in read)
    _refused(
        lambda: world.admin.register(_signed_text(root, deep, key_id(root.public_key()))), "ACTION_REQUEST_INVALID"
    )
    assert any(data == deep for data in read)  # authenticated: now it is read, and refused


def _signed_text(signer: Ed25519PrivateKey, text_: str, named_key_id: str) -> dict:
    return envelope_of(text_, named_key_id, signer.sign(pae(ACTION_PAYLOAD_TYPE, text_.encode())))


def test_ledgers_keep_verifying_requests_recorded_in_the_old_form(world):
    """Append-only ledgers hold events recorded before the DSSE envelope, as {request, signature} (the same
    signature bytes): the re-check (`ledger verify`, packages) still reads them, tampering included; no door
    accepts that form."""
    world.register("ada", ["admin"])
    bodies = world.bodies()

    def old_form(body: dict) -> dict:
        authorization = body["details"]["authorization"]
        return {
            **body,
            "details": {
                **body["details"],
                "authorization": {"request": request_text(authorization), "signature": signature_of(authorization)},
            },
        }

    legacy = [old_form(body) for body in bodies]
    assert [(f.event_type, f.actor) for f in recheck_events(legacy)] == [
        (f.event_type, f.actor) for f in recheck_events(bodies)
    ]
    assert [(f.event_type, f.actor) for f in recheck_events(legacy[:2] + bodies[2:])][-1] == (
        "actor.registered",
        "root",
    )  # one ledger, both forms: the old up to a moment, the new after it
    mixed = copy.deepcopy(legacy)
    authorization = mixed[-1]["details"]["authorization"]
    authorization["request"] = authorization["request"].replace('"admin"', '"auditor"')
    with pytest.raises(EvidenceError) as error:
        recheck_events(mixed)
    assert "ACTION_SIGNATURE_INVALID" in error.value.message
    _refused(lambda: world.admin.register(legacy[-1]["details"]["authorization"]), "ACTION_REQUEST_INVALID")


def test_the_offline_recheck_reads_the_stored_bodies(world):
    """Tampering in the database itself (guards dropped, a stored request rewritten) fails the re-check."""
    drop_append_only_guards(world.ledger)
    stored = world.bodies()[1]["details"]["authorization"]
    forged = with_text(stored, request_text(stored).replace('"operator"', '"admin"'))
    with world.ledger.engine.begin() as conn:  # the stored request's payload rewritten: olga becomes an admin
        conn.execute(
            text("UPDATE evidence_audit_events SET body = replace(body, :old, :new) WHERE seq = 2"),
            {"old": stored["payload"], "new": forged["payload"]},
        )
    body = world.bodies()[1]
    assert '"admin"' in request_text(body["details"]["authorization"])
    with pytest.raises(EvidenceError) as error:
        recheck_events(world.bodies())
    assert "ACTION_SIGNATURE_INVALID" in error.value.message


# Key files


def test_an_actor_key_file_is_private_and_never_a_service_key(tmp_path):
    settings = Settings.from_env({"EVIDENCE_HOME": str(tmp_path / "home")})
    path = tmp_path / "operator" / "alice.key"
    key = generate_actor_key(path)
    assert os.stat(path).st_mode & 0o777 == 0o600 and os.stat(path.parent).st_mode & 0o777 == 0o700
    assert public_hex(load_actor_key(path, settings)) == public_hex(key)
    with pytest.raises(EvidenceError, match="exists"):
        generate_actor_key(path)
    from_setting = Settings.from_env({"EVIDENCE_HOME": str(tmp_path / "home"), "EVIDENCE_ACTOR_KEY": str(path)})
    assert public_hex(load_actor_key(None, from_setting)) == public_hex(key)
    with pytest.raises(EvidenceError) as missing:
        load_actor_key(None, settings)
    assert missing.value.code == "ACTION_UNSIGNED"
    os.chmod(path, 0o640)
    with pytest.raises(EvidenceError) as readable:
        load_actor_key(path, settings)
    assert readable.value.code == "KEY_MATERIAL_INVALID"

    load_keyring(settings.keys_dir, generate=True)
    statement = settings.keys_dir / STATEMENT_KEY
    copied = tmp_path / "elsewhere.key"  # the service's key, copied out of the keys directory: refused by its key
    copied.write_bytes(statement.read_bytes())
    os.chmod(copied, 0o600)
    for candidate in (statement, copied):
        with pytest.raises(EvidenceError, match="service's own keys"):
            load_actor_key(candidate, settings)
    assert key_id(load_keyring(settings.keys_dir, generate=False).statement_public_key) in service_key_ids(settings)


def test_the_service_refuses_to_register_its_own_key(tmp_path):
    settings = Settings.from_env({"EVIDENCE_HOME": str(tmp_path / "home")})
    statement = load_keyring(settings.keys_dir, generate=True).statement_key
    admin = ActorAdmin(ActionGate(runtime_for(settings).actors, MAX_AGE), service_key_ids(settings))
    with pytest.raises(EvidenceError) as error:
        admin.bootstrap(
            sign_request(
                statement, "root", Action.ACTOR_BOOTSTRAP, args={"name": "root", "public_key": public_hex(statement)}
            ),
            public_hex(statement),
        )
    assert error.value.code == "KEY_MATERIAL_INVALID"


@pytest.mark.parametrize(
    "env",
    [
        {"EVIDENCE_ACTION_MAX_AGE_SECONDS": "0"},
        {"EVIDENCE_ACTION_MAX_AGE_SECONDS": "soon"},
        {"EVIDENCE_KEYS_DIR": "/srv/keys", "EVIDENCE_ACTOR_KEY": "/srv/keys/alice.key"},
    ],
)
def test_actor_settings_are_checked(env):
    with pytest.raises(EvidenceError) as error:
        Settings.from_env(env)
    assert error.value.code == "CONFIG_INVALID"
    assert Settings.from_env({}).action_max_age_seconds == 300
