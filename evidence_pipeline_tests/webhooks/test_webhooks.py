"""Signed webhooks (issue 31): announced from the ledger's outbox in the transaction of their event, delivered at
least once to a real receiver on 127.0.0.1 that checks them with the Standard Webhooks library (written from the
specification, not from this code), retried with backoff, dead after the budget and replayable."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections import Counter

import pytest
from standardwebhooks import Webhook

from evidence_pipeline.actors.offline import recheck_events
from evidence_pipeline.actors.roles import Action
from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.models import EventType
from evidence_pipeline.monthly.pipeline import run_tenant_month
from evidence_pipeline.runtime import RunInfo
from evidence_pipeline.webhooks import signing
from evidence_pipeline.webhooks.delivery import Deliverer
from evidence_pipeline.webhooks.subscriptions import replay_delivery, rotate_secret
from evidence_pipeline_tests.support.fixture_sources import SMALL
from evidence_pipeline_tests.support.offboarding import approve, ask
from evidence_pipeline_tests.support.pieces import pieces_of
from evidence_pipeline_tests.support.signers import signers_of
from evidence_pipeline_tests.support.slow_peer import SlowPeer
from evidence_pipeline_tests.support.webhook_receiver import Receiver
from evidence_pipeline_tests.support.webhooks import (
    EXPECTED,
    QUIET,
    TENANT,
    add_job,
    end_jobs_of_every_kind,
    subscribe,
    succeed,
)

DATA_FIELDS = {
    "tenant",
    "ledger_seq",
    "job_id",
    "operation",
    "state",
    "reason",
    "batch_id",
    "jobs",
    "cancelled",
    "counts",
}


@pytest.fixture
def ledger(backend, tmp_path):
    return Ledger(backend.get("EVIDENCE_LEDGER_URL", f"sqlite:///{tmp_path / 'ledger.sqlite'}"))


@pytest.fixture
def receiver():
    receivers = []

    def start(**options) -> Receiver:
        receivers.append(Receiver(**options))
        return receivers[-1]

    yield start
    for each in receivers:
        each.close()


def _settings(tmp_path, **overrides) -> Settings:
    return Settings.from_env(
        {
            "EVIDENCE_HOME": str(tmp_path / "home"),
            "EVIDENCE_WEBHOOK_RETRY_SECONDS": "1",
            "EVIDENCE_WEBHOOK_RETRY_MAX_SECONDS": "4",
            **overrides,
        }
    )


class FakeClock:
    """The deliverer's clock, moved by the test (starting now: receivers check the timestamp within 5 minutes)."""

    def __init__(self):
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def test_exactly_one_delivery_per_event_across_a_new_deliverer_and_a_receiver_that_fails_twice(
    ledger, tmp_path, receiver
):
    """In one process, on a clock of the test's (test_webhook_restart.py kills and restarts real processes)."""
    settings = _settings(tmp_path)
    hook = receiver(fail_first=2)
    hook.secrets.append(subscribe(ledger, settings, hook.url)["secret"])
    end_jobs_of_every_kind(ledger)
    outbox = pieces_of(ledger).outbox
    pending = outbox.deliveries(TENANT)
    assert Counter(row.event_type for row in pending) == EXPECTED  # the fenced commit announced nothing
    assert outbox.deliveries(QUIET) == []
    for row in pending:  # ids, kinds, codes and digests: no message, no location, no content
        body = json.loads(row.payload)
        assert body.keys() == {"type", "timestamp", "data"} and body["data"].keys() <= DATA_FIELDS
        assert "/private" not in row.payload and "a message" not in row.payload

    clock = FakeClock()
    first = Deliverer(pieces_of(ledger).outbox, settings, clock, jitter=lambda: 0.0)
    assert first.drain() == Counter({"pending": 7})  # every first attempt answered 500
    assert first.drain() == Counter()  # nothing is due before its backoff
    crashed = outbox.claim_due(clock.now + 1, first.claim_seconds, 1)  # a deliverer that claimed one and died

    clock.now += 1
    restarted = Deliverer(
        pieces_of(Ledger(ledger.engine.url.render_as_string(hide_password=False))).outbox,
        settings,
        clock,
        jitter=lambda: 0.0,
    )
    assert restarted.drain() == Counter({"pending": 6})  # second attempts, but for the claimed one
    clock.now += 2
    assert restarted.drain() == Counter({"delivered": 6})
    clock.now += restarted.claim_seconds  # the dead deliverer's claim expired
    assert restarted.drain(max_deliveries=10) == Counter({"pending": 1})
    clock.now += 2
    assert restarted.drain() == Counter({"delivered": 1}) and restarted.drain() == Counter()

    ids = [message_id for message_id, _ in hook.accepted]
    assert sorted(ids) == sorted(row.delivery_id for row in pending)  # each exactly once
    assert set(hook.attempts.values()) == {3} and hook.refused == 0 and not hook.duplicates
    assert Counter(body["type"] for _, body in hook.accepted) == EXPECTED
    bodies = {row.delivery_id: json.loads(row.payload) for row in pending}
    assert all(bodies[message_id] == body for message_id, body in hook.accepted)  # the same body every attempt
    delivered = {row.delivery_id: row for row in outbox.deliveries(TENANT, ("delivered",))}
    assert crashed[0].delivery_id in delivered and {row.attempts for row in delivered.values()} == {3}
    [finished] = [body["data"] for _, body in hook.accepted if body["type"] == "batch.finished"]
    assert (finished["batch_id"], finished["counts"]) == ("bat_one", {"succeeded": 1, "rejected": 1})
    assert ledger.verify_chain()


def test_a_tampered_message_is_refused_by_the_specification_receiver_and_rotation_signs_with_both(
    ledger, tmp_path, receiver
):
    settings = _settings(tmp_path, EVIDENCE_WEBHOOK_ROTATION_SECONDS="60")
    hook = receiver()
    hook.secrets.append(subscribe(ledger, settings, hook.url)["secret"])
    body = b'{"type":"job.succeeded","data":{"job_id":"j"}}'
    headers = signing.headers(hook.secrets, "msg_1", int(time.time()), body)
    assert Webhook(hook.secrets[0]).verify(body, headers)["data"] == {"job_id": "j"}
    tampered_body = body.replace(b'"j"', b'"k"')
    forged = headers | {
        "webhook-signature": signing.signature(signing.new_secret(), "msg_1", int(headers["webhook-timestamp"]), body)
    }
    other_id = headers | {"webhook-id": "msg_2"}
    for sent_body, sent_headers in ((tampered_body, headers), (body, forged), (body, other_id)):
        request = urllib.request.Request(hook.url, data=sent_body, headers=sent_headers, method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 400
    assert hook.refused == 3 and hook.accepted == []

    signers = signers_of(ledger)
    old = hook.secrets[0]
    rotated = rotate_secret(
        signers.gate, pieces_of(ledger).tokens, settings, signers.sign("olga", Action.WEBHOOK_ROTATE, {}, TENANT)
    )
    assert rotated["previous_secret_id"] == signing.secret_id(old) != rotated["secret_id"]
    clock = FakeClock()
    deliverer = Deliverer(pieces_of(ledger).outbox, settings, clock, jitter=lambda: 0.0)
    for secret in (old, rotated["secret"]):  # within the window both sign: a receiver holding either accepts
        hook.secrets = [secret]
        succeed(ledger, add_job(ledger, TENANT, f"signed-by-{secret[-8:]}"))
        clock.now = time.time()
        assert deliverer.drain() == Counter({"delivered": 1})
    hook.secrets = [old]
    succeed(ledger, add_job(ledger, TENANT, "after-the-window"))
    clock.now = time.time() + 61  # the window ended: the previous secret signs no more
    assert deliverer.drain() == Counter({"pending": 1}) and hook.refused == 4
    hook.secrets = [rotated["secret"]]
    clock.now += 1
    assert deliverer.drain() == Counter({"delivered": 1}) and len(hook.accepted) == 3
    events = ledger.events_of_type("webhook.configured") + ledger.events_of_type("webhook.rotated")
    assert len(events) == 2 and all(secret not in json.dumps(events) for secret in (old, rotated["secret"]))
    assert {a.action for a in recheck_events(_bodies(ledger), 300)} >= {"webhook.set", "webhook.rotate"}


def _bodies(ledger: Ledger) -> list[dict]:
    from evidence_pipeline.ledger.ledger import event_body

    with ledger.engine.connect() as conn:
        return [
            event_body(row.body)
            for row in conn.execute(ledger.audit_events.select().order_by(ledger.audit_events.c.seq))
        ]


@pytest.mark.parametrize(
    "url, code",
    [
        ("http://10.0.0.1/hook", "WEBHOOK_HOST_REFUSED"),
        ("http://169.254.169.254/latest", "WEBHOOK_HOST_REFUSED"),
        ("http://[::ffff:10.0.0.1]/hook", "WEBHOOK_HOST_REFUSED"),
        ("http://0.0.0.0:8080/", "WEBHOOK_HOST_REFUSED"),
        ("https://user:pw@127.0.0.1/hook", "WEBHOOK_URL_INVALID"),
        ("ftp://127.0.0.1/hook", "WEBHOOK_URL_INVALID"),
        ("http://127.0.0.1/hook#part", "WEBHOOK_URL_INVALID"),
    ],
)
def test_a_url_outside_loopback_is_refused_and_records_nothing(tmp_path, url, code):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    with pytest.raises(EvidenceError) as error:
        subscribe(ledger, _settings(tmp_path), url)
    assert error.value.code == code
    assert ledger.events_of_type("webhook.configured") == [] and pieces_of(ledger).outbox.subscription(TENANT) is None


def test_a_host_refused_at_delivery_is_dead_at_once_without_a_connection(tmp_path):
    """A webhook set while a wider network was allowed, delivered under the default (loopback only): dead with
    WEBHOOK_HOST_REFUSED on the first attempt; the address is checked before any connection is made."""
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    subscribe(ledger, _settings(tmp_path, EVIDENCE_WEBHOOK_ALLOWED_NETWORKS="10.0.0.0/8"), "http://10.0.0.1/hook")
    succeed(ledger, add_job(ledger, TENANT, "ok"))
    assert Deliverer(pieces_of(ledger).outbox, _settings(tmp_path)).drain() == Counter({"dead": 1})
    [dead] = pieces_of(ledger).outbox.deliveries(TENANT, ("dead",))
    assert (dead.attempts, dead.last_code, dead.last_status) == (1, "WEBHOOK_HOST_REFUSED", None)


def test_the_budget_ends_in_a_dead_delivery_that_is_listed_and_replayed(ledger, tmp_path, receiver):
    settings = _settings(tmp_path, EVIDENCE_WEBHOOK_MAX_ATTEMPTS="3")
    hook = receiver(fail_first=3)
    hook.secrets.append(subscribe(ledger, settings, hook.url)["secret"])
    succeed(ledger, add_job(ledger, TENANT, "ok"))
    clock, waits = FakeClock(), []
    deliverer = Deliverer(pieces_of(ledger).outbox, settings, clock, jitter=lambda: 1.0)
    for _ in range(3):
        outcomes = deliverer.drain()
        [row] = pieces_of(ledger).outbox.deliveries(TENANT)
        waits.append(row.next_attempt_at)
        clock.now += 10
    assert outcomes == Counter({"dead": 1}) and waits[2] is None
    [dead] = pieces_of(ledger).outbox.deliveries(TENANT, ("dead",))
    assert (dead.attempts, dead.last_code, dead.last_status) == (3, "WEBHOOK_RECEIVER_FAILED", 500)
    assert deliverer.drain() == Counter()  # dead: never attempted again by itself
    half = Deliverer(pieces_of(ledger).outbox, settings, clock, jitter=lambda: 0.0)
    assert [half.backoff(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 2.0]  # doubled, capped at 4 s, half jittered
    assert [deliverer.backoff(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 4.0]

    signers = signers_of(ledger)
    sign = signers.sign
    replayed = replay_delivery(
        signers.gate,
        sign("olga", Action.WEBHOOK_REPLAY, {"delivery_id": dead.delivery_id, "reason": "receiver fixed"}),
    )
    assert replayed.last_code == "WEBHOOK_RECEIVER_FAILED"
    [pending] = pieces_of(ledger).outbox.deliveries(TENANT, ("pending",))
    assert pending.attempts == 0 and pending.payload == dead.payload
    assert deliverer.drain() == Counter({"delivered": 1})
    assert [message_id for message_id, _ in hook.accepted] == [dead.delivery_id]  # the same webhook-id
    [event] = ledger.events_of_type("webhook.replayed")
    assert (event["actor"], event["details"]["delivery_id"]) == ("olga", dead.delivery_id)
    with pytest.raises(EvidenceError) as again:
        replay_delivery(
            signers.gate, sign("olga", Action.WEBHOOK_REPLAY, {"delivery_id": dead.delivery_id, "reason": "twice"})
        )
    assert again.value.code == "WEBHOOK_DELIVERY_NOT_DEAD"
    assert ledger.verify_chain()


def test_the_commands_set_print_the_secret_once_list_deliver_and_replay(tmp_path, monkeypatch, receiver):
    from click.testing import CliRunner

    from evidence_pipeline.cli import main
    from evidence_pipeline_tests.support.signers import Signers

    env = {"EVIDENCE_HOME": str(tmp_path / "home"), "EVIDENCE_WEBHOOK_MAX_ATTEMPTS": "1"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    ledger = Ledger(Settings.from_env(env).ledger_url)
    signers = Signers(ledger, tmp_path / "actors")
    olga = ["--key", signers.key_file("olga")]
    hook = receiver()
    cli = CliRunner()
    unknown = cli.invoke(main, ["tenant", "webhook", "set", TENANT, hook.url, *olga])
    assert unknown.exit_code == 1 and "TENANT_UNKNOWN" in unknown.output  # before: set for a tenant nobody added
    assert pieces_of(ledger).outbox.subscription(TENANT) is None and ledger.events_of_type("webhook.configured") == []
    signers.register_tenants([TENANT])
    shown = cli.invoke(main, ["tenant", "webhook", "set", TENANT, hook.url, *olga])
    assert shown.exit_code == 0, shown.output
    secret = re.search(r"secret: +(whsec_\S+)", shown.output).group(1)
    assert pieces_of(ledger).outbox.subscription(TENANT).secret == secret
    refused = cli.invoke(main, ["tenant", "webhook", "set", TENANT, "http://10.0.0.1/", *olga])
    assert refused.exit_code == 1 and "WEBHOOK_HOST_REFUSED" in refused.output
    succeed(ledger, add_job(ledger, TENANT, "ok"))
    delivered = cli.invoke(main, ["webhook", "deliver", "--json"])
    assert json.loads(delivered.output) == {"delivered": 0, "pending": 0, "dead": 1}  # no secret yet: refused
    listed = json.loads(cli.invoke(main, ["webhook", "deliveries", "--state", "dead", "--json"]).output)
    assert [(row["event_type"], row["last_code"], row["last_status"]) for row in listed] == [
        ("job.succeeded", "WEBHOOK_RECEIVER_FAILED", 400)
    ]
    hook.secrets.append(secret)
    replayed = cli.invoke(main, ["webhook", "replay", listed[0]["delivery_id"], "--reason", "secret installed", *olga])
    assert replayed.exit_code == 0, replayed.output
    assert json.loads(cli.invoke(main, ["webhook", "deliver", "--json"]).output)["delivered"] == 1
    assert [message_id for message_id, _ in hook.accepted] == [listed[0]["delivery_id"]]
    rotated = cli.invoke(main, ["tenant", "webhook", "rotate", TENANT, *olga, "--json"])
    assert json.loads(rotated.output)["previous_secret_id"] == signing.secret_id(secret)
    assert secret not in cli.invoke(main, ["webhook", "deliveries", "--json"]).output


def test_a_tenant_month_run_announces_its_bundle_in_the_transaction_that_publishes_it(runtime, tmp_path, receiver):
    """The month's bundle, however it was asked for (here by the pipeline a Dagster run executes), is announced
    once: `evidence.delivered` from an outbox row of the transaction of its `bundle.published` event."""
    ledger, settings = runtime.ledger, _settings(tmp_path)
    hook = receiver()
    hook.secrets.append(subscribe(ledger, settings, hook.url, SMALL.tenant)["secret"])
    run_tenant_month(runtime, SMALL, RunInfo("month-run"))
    published = ledger.current_publication(SMALL)
    [row] = pieces_of(ledger).outbox.deliveries(SMALL.tenant)
    assert (row.event_type, row.event_seq) == ("evidence.delivered", published.event_seq)
    [event] = ledger.events_of_type(EventType.BUNDLE_PUBLISHED, SMALL.tenant)
    assert ledger.event(published.event_seq).body == event  # the row names the bundle's own event
    run_tenant_month(runtime, SMALL, RunInfo("again"))  # converges on the published bundle: nothing new
    assert len(pieces_of(ledger).outbox.deliveries(SMALL.tenant)) == 1
    assert Deliverer(pieces_of(ledger).outbox, settings).drain() == Counter({"delivered": 1})
    [(message_id, body)] = hook.accepted
    assert message_id == row.delivery_id and body["type"] == "evidence.delivered"
    assert body["data"] == {
        "tenant": SMALL.tenant,
        "period": SMALL.period,
        "ledger_seq": published.event_seq,
        "supersedes": None,
        **{name: getattr(published, name) for name in ("identity", "report_sha256", "statement_sha256")},
    }


def test_offboarding_removes_the_webhook_and_cancels_what_was_not_delivered(documents, tmp_path, receiver):
    """Each first attempt fails: a delivery delivered, one pending (waiting a minute for its retry), one dead, and
    a job not started; offboarding leaves the first as it was and nothing to send."""
    retries = {"EVIDENCE_WEBHOOK_RETRY_SECONDS": "60", "EVIDENCE_WEBHOOK_RETRY_MAX_SECONDS": "60"}
    ledger, settings = documents.ledger, _settings(tmp_path, **retries)
    hook = receiver(fail_first=1)
    hook.secrets.append(subscribe(ledger, settings, hook.url)["secret"])
    succeed(ledger, add_job(ledger, TENANT, "delivered"))
    clock = FakeClock()
    deliverer = Deliverer(pieces_of(ledger).outbox, settings, clock, jitter=lambda: 0.0)
    assert deliverer.drain() == Counter({"pending": 1})
    clock.now += 60
    assert deliverer.drain() == Counter({"delivered": 1})
    succeed(ledger, add_job(ledger, TENANT, "pending"))
    assert deliverer.drain() == Counter({"pending": 1})  # its retry is due in 30 s of the clock
    succeed(ledger, add_job(ledger, TENANT, "dead"))
    one_try = _settings(tmp_path, EVIDENCE_WEBHOOK_MAX_ATTEMPTS="1", **retries)
    assert Deliverer(pieces_of(ledger).outbox, one_try).drain() == Counter({"dead": 1})
    waiting = add_job(ledger, TENANT, "waiting")  # not started: offboarding rejects it
    undelivered = [row.delivery_id for row in pieces_of(ledger).outbox.deliveries(TENANT, ("pending", "dead"))]
    assert len(undelivered) == 2

    ask(documents, TENANT, "contract ended")
    approve(documents, TENANT)

    assert pieces_of(ledger).outbox.subscription(TENANT) is None
    [event] = ledger.events_of_type(EventType.TENANT_OFFBOARDED, TENANT)
    [configured] = ledger.events_of_type(EventType.WEBHOOK_CONFIGURED, TENANT)
    assert event["details"]["webhook_removed"] == {
        "url_sha256": configured["details"]["url_sha256"],
        "config_seq": _seq_of(ledger, configured["event_id"]),
    }
    assert event["details"]["webhook_deliveries_cancelled"] == undelivered
    assert pieces_of(ledger).document_jobs.job(TENANT, waiting.job_id).state == "rejected"
    rows = {row.delivery_id: row for row in pieces_of(ledger).outbox.deliveries(TENANT)}
    assert len(rows) == 3  # nothing announced the rejected job: the tenant has no webhook any more
    assert [(rows[i].state, rows[i].last_code) for i in undelivered] == [("cancelled", "TENANT_OFFBOARDED")] * 2
    clock.now += 3600
    assert deliverer.drain() == Counter() and len(hook.accepted) == 1  # nothing is sent for the tenant
    signers = signers_of(ledger)
    with pytest.raises(EvidenceError) as refused:
        replay_delivery(
            signers.gate,
            signers.sign("olga", Action.WEBHOOK_REPLAY, {"delivery_id": undelivered[1], "reason": "try again"}),
        )
    assert refused.value.code == "WEBHOOK_DELIVERY_NOT_DEAD"
    with pytest.raises(EvidenceError) as refused:
        subscribe(ledger, settings, hook.url)
    assert refused.value.code == "TENANT_OFFBOARDED"
    assert ledger.verify_chain()


def _seq_of(ledger: Ledger, event_id: str) -> int:
    with ledger.engine.connect() as conn:
        return conn.execute(
            ledger.audit_events.select()
            .with_only_columns(ledger.audit_events.c.seq)
            .where(ledger.audit_events.c.event_id == event_id)
        ).scalar_one()


@pytest.fixture
def slow_peer():
    peers = []

    def start(phase: str) -> SlowPeer:
        peers.append(SlowPeer(phase))
        return peers[-1]

    yield start
    for each in peers:
        each.close()


@pytest.mark.parametrize("phase", ["headers", "body"])
def test_an_attempt_ends_at_its_deadline_whatever_the_receiver_trickles(ledger, tmp_path, slow_peer, phase):
    """A receiver that sends one byte every 0.1 s, of its headers or of its body: the attempt (timeout 1 s) ends
    with WEBHOOK_UNREACHABLE after about 10 bytes. Before: the socket timeout bounded each read, not the attempt,
    so it took all 300 bytes (30 s; 152 s in the issue) and a trickled body even counted as delivered."""
    settings = _settings(tmp_path, EVIDENCE_WEBHOOK_TIMEOUT_SECONDS="1")
    peer = slow_peer(phase)
    subscribe(ledger, settings, peer.url)
    succeed(ledger, add_job(ledger, TENANT, "ok"))
    assert Deliverer(pieces_of(ledger).outbox, settings).drain() == Counter({"pending": 1})
    [row] = pieces_of(ledger).outbox.deliveries(TENANT)
    assert row.last_code == "WEBHOOK_UNREACHABLE"
    for _ in range(600):  # the peer notices the hang-up at its next byte
        if peer.sent:
            break
        time.sleep(0.05)
    assert peer.sent and peer.sent[0] < 100 < peer.limit


def test_a_slow_receiver_delays_no_other_tenants_delivery_and_keeps_its_claim(ledger, tmp_path, slow_peer, receiver):
    """globex's receiver trickles its headers; acme's delivery, due after globex's, is delivered while globex's
    attempt is still open, and meanwhile no other deliverer can claim globex's row. Before: one delivery at a time,
    oldest first, so acme's waited for globex's attempt to end."""
    settings = _settings(tmp_path, EVIDENCE_WEBHOOK_TIMEOUT_SECONDS="3")
    slow, hook = slow_peer("headers"), receiver()
    subscribe(ledger, settings, slow.url, "globex")
    hook.secrets.append(subscribe(ledger, settings, hook.url)["secret"])
    succeed(ledger, add_job(ledger, "globex", "first"))
    succeed(ledger, add_job(ledger, TENANT, "second"))
    seen = []

    def while_accepting(_message_id: str) -> None:
        for _ in range(600):  # the two attempts start together: wait until globex's receiver has its request
            if slow.open or slow.sent:
                break
            time.sleep(0.005)
        seen.append((slow.open, pieces_of(ledger).outbox.claim_due(time.time(), 60, 10)))

    hook.before_accepting = while_accepting
    assert Deliverer(pieces_of(ledger).outbox, settings).drain() == Counter({"delivered": 1, "pending": 1})
    assert seen == [(1, [])]  # globex's attempt open, its row still claimed
