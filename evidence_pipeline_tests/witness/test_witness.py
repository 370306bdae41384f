"""An outside witness: `evidence witness serve` in processes of its own, speaking C2SP tlog-witness. Two witnesses
refuse a forked history; one that was down catches up from the size it last co-signed; a package verifies only
when the witness policy is met."""

from __future__ import annotations

import base64
import dataclasses
import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline.audit.package import inclusion_path, open_package, tlog_proof_path
from evidence_pipeline.audit.witnessing import (
    POLICY,
    checkpoint_witnessed,
    log_verifier,
    note_key,
)
from evidence_pipeline.cli import main
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.ledger import merkle
from evidence_pipeline.monthly.pipeline import run_tenant_month
from evidence_pipeline.runtime import RunInfo, Runtime
from evidence_pipeline.signed_note import (
    COSIGNATURE_V1,
    ED25519,
    Checkpoint,
    Note,
    NoteError,
    cosign,
    parse_note,
    parse_vkey,
    sign_note,
    verifier,
    verifies,
)
from evidence_pipeline.witness.client import Endpoint, submit
from evidence_pipeline.witness.policy import parse_policy
from evidence_pipeline.witness.proof import parse_tlog_proof
from evidence_pipeline_tests.support.fixture_sources import FIXTURE_MONTHS
from evidence_pipeline_tests.support.slow_peer import SlowPeer
from evidence_pipeline_tests.support.witness import (
    WITNESS,
    cosigned_checkpoint,
    export,
    go_tlog_proof_check,
    resign,
    verify,
)

EVIDENCE = str(Path(sys.executable).parent / "evidence")

# golang.org/x/mod/sumdb/note's documented example: the reference implementation's key, text and signature
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_SEED = base64.b64decode("AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz")[1:]
GO_TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
GO_NOTE = GO_TEXT + (
    "\n\u2014 PeterNeumann "
    "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)


def test_notes_and_cosignatures_are_the_c2sp_formats():
    go_key = ed25519.Ed25519PrivateKey.from_private_bytes(GO_SEED)
    assert sign_note(GO_TEXT, "PeterNeumann", go_key).encode() == GO_NOTE.encode()
    assert verifier("PeterNeumann", ED25519, go_key).vkey() == GO_VKEY
    note = parse_note(GO_NOTE.encode())
    assert verifies(note, parse_vkey(GO_VKEY, ED25519)) is True
    assert verifies(Note(GO_TEXT.replace("you", "we"), note.signatures), parse_vkey(GO_VKEY)) is False
    # a cosignature: key id over type 0x04, 8-byte big-endian timestamp, then Ed25519 over the cosigned message
    key = ed25519.Ed25519PrivateKey.generate()
    text = Checkpoint("example.com/log", 5, bytes(32)).text()
    line = cosign(text, "witness.example/w1", key, 1679315147)
    raw = base64.b64decode(line.split()[-1])
    witness = verifier("witness.example/w1", COSIGNATURE_V1, key)
    assert raw[:4] == witness.key_id and int.from_bytes(raw[4:12], "big") == 1679315147
    key.public_key().verify(raw[12:], f"cosignature/v1\ntime 1679315147\n{text}".encode())
    cosigned = parse_note(sign_note(text, "example.com/log", key).encode() + line.encode())
    assert verifies(cosigned, witness) is True
    assert verifies(cosigned, verifier("witness.example/w2", COSIGNATURE_V1, key)) is None  # another name


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclasses.dataclass
class WitnessProcess:
    """`evidence witness serve` in its own process; stop() and start() again keep its state folder."""

    name: str
    key: Path
    state: Path
    logs: list[str]
    port: int = dataclasses.field(default_factory=_free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def vkey(self) -> str:
        return subprocess.run(
            [EVIDENCE, "witness", "vkey", "--name", self.name, "--key", str(self.key)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.url, parse_vkey(self.vkey))

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                EVIDENCE,
                "witness",
                "serve",
                "--name",
                self.name,
                "--key",
                str(self.key),
                "--state",
                str(self.state),
                "--port",
                str(self.port),
                *[arg for vkey in self.logs for arg in ("--log", vkey)],
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def wait(self) -> None:
        for _ in range(600):  # readiness, not timing: poll until it answers or has exited
            if self.process.poll() is not None:
                raise AssertionError(self.process.stderr.read().decode())
            try:
                httpx.post(f"{self.url}/add-checkpoint", content=b"", timeout=1)
                return
            except httpx.TransportError:
                time.sleep(0.05)
        raise AssertionError("the witness never answered")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def _witnesses(tmp_path: Path, log_vkeys: list[str], count: int = 2) -> list[WitnessProcess]:
    witnesses = []
    for number in range(1, count + 1):
        key = tmp_path / f"w{number}" / "witness.key"
        keygen = CliRunner().invoke(main, ["witness", "keygen", "--name", f"witness.test/w{number}", "--key", str(key)])
        assert keygen.exit_code == 0, keygen.output
        witnesses.append(WitnessProcess(f"witness.test/w{number}", key, tmp_path / f"w{number}" / "state", log_vkeys))
    return witnesses


@pytest.fixture
def running(request):
    """Start the given witnesses together (their start-up overlaps) and stop them after the test."""
    started: list[WitnessProcess] = []

    def run(*witnesses: WitnessProcess) -> None:
        for witness in witnesses:
            witness.start()
            started.append(witness)
        for witness in witnesses:
            witness.wait()

    yield run
    for witness in started:
        if witness.process.poll() is None:
            witness.stop()


def _leaves(count: int, tag: bytes = b"event") -> list[bytes]:
    return [merkle.leaf_hash(tag + b" %d" % i) for i in range(count)]


def _signed(log: ed25519.Ed25519PrivateKey, leaves: list[bytes], origin: str = "log.test/ledger") -> Note:
    return sign_note(Checkpoint(origin, len(leaves), merkle.root(leaves)).text(), origin, log)


def test_two_witnesses_refuse_a_forked_history(tmp_path, running):
    log = ed25519.Ed25519PrivateKey.generate()
    witnesses = _witnesses(tmp_path, [verifier("log.test/ledger", ED25519, log).vkey()])
    running(*witnesses)
    honest, fork = _leaves(7), _leaves(5) + _leaves(2, b"another")  # the fork rewrites nothing: it appends others
    fork[3] = merkle.leaf_hash(b"rewritten")  # ... and rewrites event 3
    endpoints = [witness.endpoint for witness in witnesses]
    for endpoint in endpoints:  # both co-sign the honest head at 5, then at 7
        line = submit(endpoint, _signed(log, honest[:5]), size=5, old=0, proof=lambda old: [])
        assert verifies(
            Note(_signed(log, honest[:5]).text, parse_note(b"x\n\n" + line.encode()).signatures), endpoint.key
        )
        submit(endpoint, _signed(log, honest), size=7, old=5, proof=lambda old: merkle.consistency_proof(old, honest))
    for endpoint in endpoints:
        # the fork at the same size: 409 with the witness's size; with a proof it cannot have: 422
        with pytest.raises(EvidenceError) as error:
            submit(endpoint, _signed(log, fork), size=7, old=7, proof=lambda old: [])
        assert error.value.code == "WITNESS_REFUSED" and "answered 409" in error.value.message
        longer = fork + _leaves(3, b"more")
        with pytest.raises(EvidenceError) as error:
            submit(
                endpoint, _signed(log, longer), size=10, old=7, proof=lambda old: merkle.consistency_proof(old, longer)
            )
        assert error.value.code == "WITNESS_REFUSED" and "answered 422" in error.value.message
    # the state is durable: restarted, the witnesses still know size 7 and still refuse the fork
    for witness in witnesses:
        witness.stop()
    running(*witnesses)
    longer = fork + _leaves(3, b"more")
    raw = httpx.post(f"{witnesses[0].url}/add-checkpoint", content=b"old 0\n\n" + _signed(log, longer).encode())
    assert (raw.status_code, raw.text, raw.headers["content-type"]) == (409, "7\n", "text/x.tlog.size")
    with pytest.raises(EvidenceError) as error:
        submit(
            witnesses[1].endpoint,
            _signed(log, longer),
            size=10,
            old=0,
            proof=lambda old: merkle.consistency_proof(old, longer),
        )
    assert "answered 422" in error.value.message  # caught up to 7 on the 409, then the proof fails
    # the protocol's other answers
    stranger = ed25519.Ed25519PrivateKey.generate()
    post = lambda body: httpx.post(f"{witnesses[0].url}/add-checkpoint", content=body).status_code  # noqa: E731
    assert post(b"old 7\n\n" + _signed(stranger, honest).encode()) == 403
    assert post(b"old 0\n\n" + _signed(log, honest, "other.test/log").encode()) == 404
    assert post(b"old 8\n\n" + _signed(log, honest).encode()) == 400  # old above the checkpoint's size
    assert post(b"old seven\n\n" + _signed(log, honest).encode()) == 400
    assert post(b"old 7\n\n" + _signed(log, honest).encode()) == 200  # the same head again: co-signed
    for state in witnesses[0].state.glob("*.checkpoint"):  # an unreadable record: never taken for "size 0"
        state.write_text("garbage\n")
    assert post(b"old 0\n\n" + _signed(log, fork).encode()) == 500


def test_a_witness_that_was_down_catches_up_and_the_policy_decides(local_runtime, tmp_path, running):
    settings = local_runtime.settings
    log_vkey = log_verifier(settings.log_origin, local_runtime.keyring.statement_public_key).vkey()
    assert (
        CliRunner().invoke(main, ["ledger", "vkey"], env={"EVIDENCE_HOME": str(settings.home)}).output.strip()
        == log_vkey
    )
    first, second, absent = _witnesses(tmp_path, [log_vkey], count=3)
    running(first, second)
    runtime = Runtime.from_settings(
        dataclasses.replace(settings, witnesses=tuple((w.url, w.vkey) for w in (first, second)))
    )
    run_tenant_month(runtime, FIXTURE_MONTHS[0], RunInfo("run-1"))
    checkpoint, outcome = checkpoint_witnessed(runtime)
    assert outcome == {first.name: "cosigned", second.name: "cosigned"}
    sizes = [checkpoint["size"]]

    second.stop()
    run_tenant_month(runtime, FIXTURE_MONTHS[1], RunInfo("run-2"))
    checkpoint, outcome = checkpoint_witnessed(runtime)
    assert outcome == {first.name: "cosigned", second.name: "WITNESS_UNAVAILABLE"}
    sizes.append(checkpoint["size"])
    export(settings.home, tmp_path / "one-witness", 1)

    running(second)  # back, with its state: it co-signed the first size, never the second
    run_tenant_month(runtime, FIXTURE_MONTHS[2], RunInfo("run-3"))
    checkpoint, outcome = checkpoint_witnessed(runtime)
    assert outcome == {first.name: "cosigned", second.name: "cosigned"}  # from the first size to the third
    sizes.append(checkpoint["size"])
    recorded = [key.split("/")[-2] for key in runtime.archive.list("ledger/cosignatures")]
    assert sorted(recorded) == sorted([f"{sizes[0]:012d}"] * 2 + [f"{sizes[1]:012d}"] + [f"{sizes[2]:012d}"] * 2)
    export(settings.home, tmp_path / "both", 2)

    pins = ["--witness", first.vkey, "--witness", second.vkey]
    both = tmp_path / "both"
    assert verify(both, *pins, "--witness-policy", "2")[0] == 0
    assert verify(both, *pins)[0] == 0  # default: all of them
    code, report = verify(tmp_path / "one-witness", *pins, "--witness-policy", "2")
    assert code == 1 and report["codes"] == ["WITNESS_POLICY_NOT_MET"]
    assert verify(tmp_path / "one-witness", *pins, "--witness-policy", "1")[0] == 0
    code, report = verify(both, *pins, "--witness", absent.vkey, "--witness-policy", "3")
    assert code == 1 and report["codes"] == ["WITNESS_POLICY_NOT_MET"]
    assert all(bundle["ok"] for bundle in report["bundles"])  # the bundles are fine: only the policy fails
    # the package's note is a C2SP cosigned checkpoint; a cosignature altered fails by its own code (and, as any
    # altered file of a package, by the signed index's digest of it)
    path = both / note_key(checkpoint["size"])
    note = parse_note(path.read_bytes())
    assert note.signatures[0][0] == settings.log_origin
    assert sorted(name for name, _ in note.signatures[1:]) == [first.name, second.name]
    forged = tuple(
        (name, sig[:-1] + bytes([sig[-1] ^ 1]) if name == second.name else sig) for name, sig in note.signatures
    )
    path.chmod(0o644)
    path.write_bytes(Note(note.text, forged).encode())
    code, report = verify(both, *pins, "--witness-policy", "1")
    assert code == 1 and sorted(report["codes"]) == [
        "PACKAGE_FILE_MISMATCH",
        "PROOF_INVALID",  # the tlog proofs
        "WITNESS_SIGNATURE_INVALID",
    ]  # hold the note as it was
    usage = CliRunner().invoke(
        main, ["verify", "--package", str(both), "--witness", first.vkey, "--witness-policy", "2"]
    )
    assert usage.exit_code == 2 and "needs at least 2" in usage.output


def test_ledger_checkpoint_exits_1_when_the_witness_policy_is_not_met(local_runtime, tmp_path, running):
    """One witness trusts the log, the other another key (it refuses with 403). Before: `evidence ledger checkpoint`
    exited 0 whatever the witnesses answered, every one refusing included."""
    settings = local_runtime.settings
    log_vkey = log_verifier(settings.log_origin, local_runtime.keyring.statement_public_key).vkey()
    stranger = log_verifier(settings.log_origin, ed25519.Ed25519PrivateKey.generate().public_key()).vkey()
    trusting, refusing = _witnesses(tmp_path, [log_vkey])
    refusing.logs = [stranger]
    running(trusting, refusing)
    run_tenant_month(local_runtime, FIXTURE_MONTHS[0], RunInfo("run-1"))

    def checkpoint(*witnesses: WitnessProcess, policy: tuple[str, ...] = ()):
        env = {
            "EVIDENCE_HOME": str(settings.home),
            "EVIDENCE_WITNESSES": ",".join(f"{w.url} {w.vkey}" for w in witnesses),
        }
        result = CliRunner().invoke(main, ["ledger", "checkpoint", *policy], env=env)
        assert "Traceback" not in result.output, result.output
        return result.exit_code, result.output

    code, output = checkpoint(refusing)  # every witness refuses
    assert code == 1 and "WITNESS_POLICY_NOT_MET" in output and f"{refusing.name}: WITNESS_REFUSED" in output
    code, output = checkpoint(trusting, refusing)  # one of two, and the default policy is all of them
    assert code == 1 and "co-signed by 1 of 2 witnesses" in output
    assert checkpoint(trusting, refusing, policy=("--witness-policy", "1"))[0] == 0
    assert checkpoint(trusting)[0] == 0


@pytest.mark.parametrize("phase", ["headers", "body"])
def test_a_submission_ends_at_its_deadline_whatever_the_witness_trickles(phase):
    """A witness that answers one byte every 0.1 s: the submission (timeout 1 s) is WITNESS_UNAVAILABLE after about
    10 bytes. Before: httpx's timeout bounded each read, not the call, so it waited for all 300."""
    log = ed25519.Ed25519PrivateKey.generate()
    peer = SlowPeer(phase)
    endpoint = Endpoint(peer.url, verifier("witness.test/slow", COSIGNATURE_V1, log))
    try:
        with pytest.raises(EvidenceError) as error:
            submit(endpoint, _signed(log, _leaves(2)), size=2, old=0, proof=lambda old: [], timeout=1)
        for _ in range(600):  # the peer notices the hang-up at its next byte
            if peer.sent:
                break
            time.sleep(0.05)
    finally:
        peer.close()
    assert error.value.code == "WITNESS_UNAVAILABLE"
    assert peer.sent and peer.sent[0] < 100 < peer.limit


def _reissued(
    runtime: Runtime, witness: ed25519.Ed25519PrivateKey, size: int, root: bytes, origin: str | None = None
) -> bytes:
    """A note the operator can make alone: signed by the statement key, co-signed by a witness that accepts it."""
    origin = origin or runtime.settings.log_origin
    text = Checkpoint(origin, size, root).text()
    note = sign_note(text, origin, runtime.keyring.statement_key)
    line = cosign(text, WITNESS, witness, 1_800_000_000)
    return Note(text, note.signatures + parse_note(b"x\n\n" + line.encode()).signatures).encode()


def _replace(path: Path, data: bytes) -> None:
    path.chmod(0o644)
    path.write_bytes(data)


def test_every_note_is_checked_against_the_pinned_origin_and_one_root_per_size(local_runtime, tmp_path):
    """Issue 51: the package index re-signed by the statement key, each of these verified (exit 0) before: the
    newest checkpoint re-issued under another origin, an older one's root flipped, its cosignature broken, a second
    properly signed root for its size. `evidence ledger verify` checks the archive's notes the same way."""
    witness = ed25519.Ed25519PrivateKey.generate()
    witness_vkey = verifier(WITNESS, COSIGNATURE_V1, witness).vkey()
    pins = ["--witness", witness_vkey, "--witness-policy", "1"]
    runtime = local_runtime
    checkpoints = []
    for number, month in enumerate(FIXTURE_MONTHS):
        run_tenant_month(runtime, month, RunInfo(f"run-{number}"))
        checkpoints.append(cosigned_checkpoint(runtime, witness))
    home = runtime.settings.home
    export(home, tmp_path / "package", 1, f"https://witness.invalid {witness_vkey}")
    package = tmp_path / "package"
    origin = ["--origin", runtime.settings.log_origin]
    assert verify(package, *pins, *origin)[0] == 0
    newest, older = checkpoints[-1], checkpoints[0]
    log_vkey = log_verifier(runtime.settings.log_origin, runtime.keyring.statement_public_key).vkey()
    # the package's c2sp.org/tlog-policy: the log, every configured witness; used when the auditor pins none
    assert (
        package / POLICY
    ).read_text() == f"log {log_vkey}\nwitness w1 {witness_vkey}\ngroup witnesses 1 w1\nquorum witnesses\n"
    code, report = verify(package)
    assert code == 0 and report["witness_policy"]["pinned"] is False, report["codes"]
    own, stranger = tmp_path / "auditor.tlog-policy", tmp_path / "stranger.tlog-policy"
    own.write_text(f"# mine\nlog {log_vkey}\nwitness mine {witness_vkey}\nquorum mine\n")
    stranger_vkey = verifier("witness.test/stranger", COSIGNATURE_V1, ed25519.Ed25519PrivateKey.generate()).vkey()
    stranger.write_text(
        f"log {log_vkey}\nwitness a {witness_vkey}\nwitness b {stranger_vkey}\ngroup g all a b\nquorum g\n"
    )
    assert verify(package, "--policy", str(own))[0] == 0
    code, report = verify(package, "--policy", str(stranger))
    assert code == 1 and report["codes"] == ["WITNESS_POLICY_NOT_MET"]
    bundles = open_package(str(package))[1].signed.document["bundles"]
    proofs = [package / tlog_proof_path(bundle["path"]) for bundle in bundles]
    assert len(proofs) == 2 and all(
        parse_tlog_proof(p.read_bytes()).checkpoint.encode() == (package / note_key(newest["size"])).read_bytes()
        for p in proofs
    )
    go_check = go_tlog_proof_check(tmp_path)
    for bundle, proof in zip(bundles, proofs):
        event = package / json.loads((package / inclusion_path(bundle["path"])).read_text())["event"]
        checked = subprocess.run([go_check, proof, log_vkey, event], capture_output=True, text=True)
        assert checked.stdout.startswith("ok "), checked.stdout
    flipped_proof = parse_tlog_proof(proofs[0].read_bytes())
    flipped_proof = dataclasses.replace(flipped_proof, hashes=(bytes(32),) + flipped_proof.hashes[1:])
    copy = tmp_path / "flipped-proof"
    shutil.copytree(package, copy)
    _replace(copy / tlog_proof_path(bundles[0]["path"]), flipped_proof.encode())
    resign(copy, runtime)
    code, report = verify(copy, *pins, *origin)
    assert code == 1 and report["codes"] == ["PROOF_INVALID"]
    checked = subprocess.run(
        [go_check, copy / tlog_proof_path(bundles[0]["path"]), log_vkey, event], capture_output=True, text=True
    )
    assert checked.returncode == 1  # and Go refuses it too

    def tampered(name: str, size: int, note: bytes) -> tuple[int, dict]:
        copy = tmp_path / name
        shutil.copytree(package, copy)
        _replace(copy / note_key(size), note)
        for path in copy.glob("proofs/tlog/**/*.tlog-proof"):  # the bundles' proofs carry the newest note too
            if size == newest["size"]:
                _replace(
                    path, dataclasses.replace(parse_tlog_proof(path.read_bytes()), checkpoint=parse_note(note)).encode()
                )
        resign(copy, runtime)
        return verify(copy, *pins)

    def failed(report: dict) -> list[str]:
        return [f"{c['name']}: {c['code']}: {c['detail']}" for c in report["checks"] if not c["passed"]]

    moved = _reissued(runtime, witness, newest["size"], bytes.fromhex(newest["root_sha256"]), "other.test/ledger")
    code, report = tampered("moved", newest["size"], moved)
    assert code == 1 and report["codes"] == ["LOG_ORIGIN_MISMATCH"], failed(report)
    assert verify(tmp_path / "moved", *pins, *origin)[1]["codes"] == ["LOG_ORIGIN_MISMATCH"]
    assert verify(tmp_path / "moved", "--policy", str(own))[1]["codes"] == ["LOG_ORIGIN_MISMATCH"]
    code, report = verify(package, *pins, "--origin", "other.test/ledger")  # the honest package, another pin
    assert code == 1 and report["codes"] == ["LOG_ORIGIN_MISMATCH"]

    note = parse_note((package / note_key(older["size"])).read_bytes())
    lines = note.text.split("\n")
    root = base64.b64decode(lines[2])
    flipped = bytes([root[0] ^ 1]) + root[1:]
    lines[2] = base64.b64encode(flipped).decode()
    code, report = tampered("flipped", older["size"], Note("\n".join(lines), note.signatures).encode())
    assert code == 1 and report["codes"] == ["CHECKPOINT_INVALID"], failed(report)

    broken = tuple((name, sig[:-1] + bytes([sig[-1] ^ 1]) if name == WITNESS else sig) for name, sig in note.signatures)
    code, report = tampered("broken", older["size"], Note(note.text, broken).encode())
    assert code == 1 and report["codes"] == ["WITNESS_SIGNATURE_INVALID"], failed(report)

    second = _reissued(runtime, witness, older["size"], flipped)
    code, report = tampered("second", older["size"], second)
    assert code == 1 and report["codes"] == ["CHECKPOINT_CONFLICT"], failed(report)
    assert [
        f"{older['root_sha256']} (ledger/checkpoints/{older['size']:012d}.json) and {flipped.hex()}" in detail
        for detail in failed(report)
    ] == [True]

    def ledger_verify(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(main, ["ledger", "verify", *pins, *args], env={"EVIDENCE_HOME": str(home)})
        assert "Traceback" not in result.output, result.output
        return result.exit_code, result.output

    assert ledger_verify()[0] == 0
    code, output = ledger_verify("--origin", "other.test/ledger")
    assert code != 0 and "LOG_ORIGIN_MISMATCH" in output
    _replace(
        runtime.archive.root / note_key(older["size"]),
        second.split(b"\n\n")[0] + b"\n\n" + second.split(b"\n\n")[1].split(b"\n")[0] + b"\n",
    )  # the archive's note holds the log's line; cosignatures lie apart
    code, output = ledger_verify()
    assert code != 0 and "CHECKPOINT_CONFLICT" in output and flipped.hex() in output


def test_tlog_policy_files_parse_and_decide_as_the_specification_says():
    """c2sp.org/tlog-policy: groups of groups, all/any/k thresholds, `quorum none`; what the format refuses."""
    keys = {
        name: verifier(f"witness.test/{name}", COSIGNATURE_V1, ed25519.Ed25519PrivateKey.generate()).vkey()
        for name in ("x1", "x2", "x3", "y1", "y2")
    }
    log = verifier("log.test/ledger", ED25519, ed25519.Ed25519PrivateKey.generate()).vkey()
    text = (
        f"  # the example's shape\nlog {log} https://log.test\n\n"
        + "".join(f"witness {name}\t{vkey}\n" for name, vkey in keys.items())
        + "group X 2 x1 x2 x3\ngroup Y any y1 y2\ngroup XY all X Y\nquorum XY\n"
    )
    policy = parse_policy(text.encode())
    assert policy.origins == ("log.test/ledger",) and policy.quorum == "XY"
    assert policy.met({"x1", "x3", "y2"}) and not policy.met({"x1", "y1", "y2"}) and not policy.met({"x1", "x2"})
    assert parse_policy(policy.encode()) == policy
    assert parse_policy(b"quorum none\n").met(set())
    for broken in (
        b"",
        b"quorum none\nquorum none\n",
        f"witness a {keys['x1']}\nquorum b\n".encode(),
        f"witness a {keys['x1']}\nwitness b {keys['x1']}\nquorum a\n".encode(),  # one key twice
        f"witness a {keys['x1']}\ngroup g 2 a\nquorum g\n".encode(),  # k above n
        f"witness a {keys['x1']}\ngroup g any a a\nquorum g\n".encode(),  # a member twice
        f"witness none {keys['x1']}\nquorum none\n".encode(),
        f"log {keys['x1']}\nquorum none\n".encode(),
        b"quorum none\r\n",
    ):
        with pytest.raises(NoteError):
            parse_policy(broken)
