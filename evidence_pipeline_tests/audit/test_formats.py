"""Evidence in the formats auditors' own tools read (issue 51): the downloadable bundle's C2SP tlog proof, checked by
`evidence verify` and by Go's golang.org/x/mod/sumdb."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric import ed25519
from trestle.oscal.assessment_results import AssessmentResults

from evidence_pipeline.audit.checkpoints import publish_checkpoint
from evidence_pipeline.audit.oscal import DEFAULT_CONTROLS
from evidence_pipeline.audit.package import open_package, tlog_proof_path
from evidence_pipeline.audit.witnessing import POLICY, log_verifier
from evidence_pipeline.cli import main
from evidence_pipeline.intake.downloads import current_evidence
from evidence_pipeline.monthly.pipeline import run_tenant_month
from evidence_pipeline.runtime import RunInfo, Runtime
from evidence_pipeline.signed_note import COSIGNATURE_V1, verifier
from evidence_pipeline.witness.proof import parse_tlog_proof
from evidence_pipeline_tests.support.etsi_schema import indications
from evidence_pipeline_tests.support.fixture_sources import FIXTURE_MONTHS
from evidence_pipeline_tests.support.witness import (
    WITNESS,
    cosigned_checkpoint,
    export,
    go_tlog_proof_check,
    resign,
    verify,
)


def _download(runtime: Runtime, month, out: Path) -> Path:
    """The month's bundle file, as GET /v1/evidence/{period}/bundle streams it."""
    evidence = current_evidence(runtime, month.tenant, month.period)
    out.write_bytes(b"".join(evidence.file.stream(runtime.archive)))
    return out


def _verify_file(path: Path, home: Path, *args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(main, ["verify", str(path), "--json", *args], env={"EVIDENCE_HOME": str(home)})
    assert "Traceback" not in result.output, result.output
    return result.exit_code, json.loads(result.output)


def _failed(report: dict) -> list[tuple[str, str]]:
    return [(check["name"], check["code"]) for check in report["checks"] if not check["passed"]]


def _with_witness(runtime: Runtime) -> tuple[Runtime, ed25519.Ed25519PrivateKey, str]:
    """The runtime with one configured witness (its cosignatures made in-process), the witness's key and vkey."""
    witness = ed25519.Ed25519PrivateKey.generate()
    vkey = verifier(WITNESS, COSIGNATURE_V1, witness).vkey()
    return (
        Runtime.from_settings(dataclasses.replace(runtime.settings, witnesses=(("https://witness.invalid", vkey),))),
        witness,
        vkey,
    )


def test_the_downloadable_bundle_carries_a_tlog_proof_that_verify_and_go_check(local_runtime, tmp_path):
    """Before: the bundle file held keys/ and the bundle folder only; no proof of its place in the log."""
    runtime, witness, witness_vkey = _with_witness(local_runtime)
    month = FIXTURE_MONTHS[0]
    published = run_tenant_month(runtime, month, RunInfo("run-1"))
    home = runtime.settings.home
    early = _download(runtime, month, tmp_path / "early.tar")  # no checkpoint covers it yet: verified, with a notice
    result = CliRunner().invoke(main, ["verify", str(early)], env={"EVIDENCE_HOME": str(home)})
    assert result.exit_code == 0 and "NOTICE: the file holds no tlog proof" in result.output, result.output
    code, report = _verify_file(early, home, "--origin", runtime.settings.log_origin)  # a pin asks for one
    assert code == 1 and _failed(report) == [("tlog_proof", "LEDGER_NOT_CHECKPOINTED")]

    cosigned_checkpoint(runtime, witness)
    path = _download(runtime, month, tmp_path / "bundle.tar")
    reads, leaves = [], runtime.ledger.leaves
    runtime.ledger.leaves = lambda limit=None: reads.append(limit) or leaves(limit)
    assert _download(runtime, month, tmp_path / "again.tar").read_bytes() == path.read_bytes()
    assert reads == []  # the checkpointed tree is read once per process, not per download
    proof_path = tlog_proof_path(published.bundle_key)
    with tarfile.open(path) as tar:
        names = tar.getnames()
        proof = parse_tlog_proof(tar.extractfile(proof_path).read())
        event_name = next(name for name in names if name.startswith("events/"))
        (tmp_path / "event.json").write_bytes(tar.extractfile(event_name).read())
        (tmp_path / "bundle.tlog-proof").write_bytes(tar.extractfile(proof_path).read())
        policy = tar.extractfile(POLICY).read().decode()
    assert proof_path in names and any(name.startswith("ledger/checkpoints/") for name in names)
    log_vkey = log_verifier(runtime.settings.log_origin, runtime.keyring.statement_public_key).vkey()
    assert policy == f"log {log_vkey}\nwitness w1 {witness_vkey}\ngroup witnesses 1 w1\nquorum witnesses\n"
    code, report = _verify_file(path, home)  # the origin: the file's policy names one log
    assert code == 0 and ("tlog_proof", True) in [(c["name"], c["passed"]) for c in report["checks"]], report
    checked = subprocess.run(
        [go_tlog_proof_check(tmp_path), tmp_path / "bundle.tlog-proof", log_vkey, tmp_path / "event.json"],
        capture_output=True,
        text=True,
    )
    assert checked.stdout.startswith(f"ok {proof.index} "), checked.stdout

    code, report = _verify_file(path, home, "--origin", "other.test/ledger")
    assert code == 1 and _failed(report) == [("tlog_proof", "LOG_ORIGIN_MISMATCH")]
    stranger = verifier("witness.test/stranger", COSIGNATURE_V1, ed25519.Ed25519PrivateKey.generate()).vkey()
    code, report = _verify_file(path, home, "--witness", stranger)
    assert code == 1 and _failed(report) == [("tlog_proof", "WITNESS_POLICY_NOT_MET")]
    flipped = dataclasses.replace(proof, hashes=(bytes(32),) + proof.hashes[1:]).encode()
    code, report = _verify_file(_rewritten(path, tmp_path / "flipped.tar", proof_path, flipped), home)
    assert code == 1 and _failed(report) == [("tlog_proof", "PROOF_INVALID")]


def _rewritten(path: Path, out: Path, name: str, data: bytes) -> Path:
    """The bundle file with one member's bytes (and its recorded sha256) replaced: a consistent forgery."""
    import hashlib
    import io

    with tarfile.open(path) as tar, tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as rewritten:
        for info in tar.getmembers():
            content = tar.extractfile(info).read()
            if info.name == name:
                content = data
                info.size = len(data)
                info.pax_headers = {**info.pax_headers, "EVIDENCE.sha256": hashlib.sha256(data).hexdigest()}
            rewritten.addfile(info, io.BytesIO(content))
    return out


def test_without_origin_the_policy_pins_it_and_nothing_else_does(local_runtime, tmp_path):
    """Before: without --origin the first note's origin was the pin, so a package whose notes all moved to another
    origin (its policy file removed, the index re-signed by the statement key) verified with a pinned witness."""
    witness = ed25519.Ed25519PrivateKey.generate()
    witness_vkey = verifier(WITNESS, COSIGNATURE_V1, witness).vkey()
    runtime = local_runtime
    run_tenant_month(runtime, FIXTURE_MONTHS[0], RunInfo("run-1"))
    cosigned_checkpoint(runtime, witness)
    package = tmp_path / "package"
    export(runtime.settings.home, package, 1, f"https://witness.invalid {witness_vkey}")
    pins = ["--witness", witness_vkey, "--witness-policy", "1"]
    code, report = verify(package, *pins)  # the package's tlog-policy names the log: its origin is the pin
    assert code == 0 and (report["origin"], report["origin_pinned"]) == (runtime.settings.log_origin, False)
    assert verify(package, *pins, "--origin", runtime.settings.log_origin)[1]["origin_pinned"] is True

    bare = tmp_path / "no-policy"
    shutil.copytree(package, bare)
    (bare / POLICY).unlink()
    resign(bare, runtime)
    code, report = verify(bare, *pins)
    assert code == 1 and report["codes"] == ["LOG_ORIGIN_NOT_PINNED"], report["codes"]
    assert verify(bare, *pins, "--origin", runtime.settings.log_origin)[0] == 0
    own = tmp_path / "auditor.tlog-policy"
    log_vkey = log_verifier(runtime.settings.log_origin, runtime.keyring.statement_public_key).vkey()
    own.write_text(f"log {log_vkey}\nwitness mine {witness_vkey}\nquorum mine\n")
    assert verify(bare, "--policy", str(own))[0] == 0  # the auditor's policy names the log

    def ledger_verify(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(
            main, ["ledger", "verify", *args], env={"EVIDENCE_HOME": str(runtime.settings.home)}
        )
        assert "Traceback" not in result.output, result.output
        return result.exit_code, result.output

    assert ledger_verify()[0] == 0  # the deployment's EVIDENCE_LOG_ORIGIN
    code, output = ledger_verify("--origin", "other.test/ledger")
    assert code == 1 and "LOG_ORIGIN_MISMATCH" in output


def test_verify_writes_an_etsi_validation_report_per_signature(local_runtime, tmp_path):
    """`evidence verify … --report etsi DIR`: TOTAL-PASSED for the signed report, TOTAL-FAILED (HASH_FAILURE) for
    one whose signed bytes changed. Before: no such option (usage error)."""
    runtime = local_runtime
    month = FIXTURE_MONTHS[0]
    published = run_tenant_month(runtime, month, RunInfo("run-1"))
    bundle = runtime.archive.root / published.bundle_key
    home = runtime.settings.home
    out = tmp_path / "etsi"
    result = CliRunner().invoke(
        main, ["verify", str(bundle), "--report", "etsi", str(out)], env={"EVIDENCE_HOME": str(home)}
    )
    assert result.exit_code == 0, result.output
    written = out / published.bundle_key.removeprefix("bundles/") / "EvidenceSignature.xml"
    assert f"etsi report {written}: total-passed" in result.output
    assert indications(written.read_bytes()) == ("total-passed", ["OK"])

    path = _download(runtime, month, tmp_path / "bundle.tar")
    with tarfile.open(path) as tar:
        report = tar.extractfile(f"{published.bundle_key}/report.pdf").read()
    at = report.index(b"stream") + 20  # a byte of the first content stream, inside the signed range
    tampered = _rewritten(
        path,
        tmp_path / "tampered.tar",
        f"{published.bundle_key}/report.pdf",
        report[:at] + bytes([report[at] ^ 1]) + report[at + 1 :],
    )
    refused = CliRunner().invoke(
        main, ["verify", str(tampered), "--report", "etsi", str(tmp_path / "bad")], env={"EVIDENCE_HOME": str(home)}
    )
    assert refused.exit_code == 1 and "PDF_SIGNATURE_INVALID" in refused.output, refused.output
    bad = tmp_path / "bad" / published.bundle_key.removeprefix("bundles/") / "EvidenceSignature.xml"
    assert indications(bad.read_bytes()) == ("total-failed", ["HASH_FAILURE"])


def _assessment(path: Path):
    """The document validated by compliance-trestle's OSCAL models (code we did not write)."""
    from trestle.oscal.assessment_results import AssessmentResults

    document = json.loads(path.read_text())
    AssessmentResults.model_validate(document["assessment-results"])
    (result,) = document["assessment-results"]["results"]
    return result


def test_oscal_assessment_results_per_tenant_month_deterministic_and_fresh(local_runtime, tmp_path):
    """`evidence verify … --report oscal DIR`: valid OSCAL (trestle), controls satisfied with the checks they map,
    the month as the window, the witness's cosignature time as when it was collected, the same bytes twice, stale
    past a control's max age. Before: no such report (usage error)."""
    runtime, witness, witness_vkey = _with_witness(local_runtime)
    month = FIXTURE_MONTHS[0]
    published = run_tenant_month(runtime, month, RunInfo("run-1"))
    cosigned_checkpoint(runtime, witness)  # cosigned at 1_800_000_000: 2027-01-15T08:00:00Z
    path = _download(runtime, month, tmp_path / "bundle.tar")
    home = runtime.settings.home
    folder = published.bundle_key.removeprefix("bundles/")

    def assess(name: str, *args: str, file: Path = path) -> Path:
        result = CliRunner().invoke(
            main,
            ["verify", str(file), "--report", "oscal", str(tmp_path / name), *args],
            env={"EVIDENCE_HOME": str(home)},
        )
        assert "Traceback" not in result.output, result.output
        return tmp_path / name / folder / "assessment-results.json"

    first, again = assess("first"), assess("again")
    assert first.read_bytes() == again.read_bytes()  # content-derived UUIDs, no clock read
    result = _assessment(first)
    assert (result["start"], result["end"]) == (f"{month.period}-01T00:00:00Z", result["end"])
    assert result["end"] > result["start"] and result["end"].endswith("-01T00:00:00Z")
    (observation,) = result["observations"]
    props = {p["name"]: p["value"] for p in observation["props"]}
    assert observation["collected"] == "2027-01-15T08:00:00Z" and props["time-source"] == "witness-cosignature"
    assert props["check-tlog-proof"] == "passed" and props["tenant"] == month.tenant
    manifest = json.loads(runtime.archive.get(f"{published.bundle_key}/manifest.json"))
    assert {e["href"]: e["props"][0]["value"] for e in observation["relevant-evidence"]} == {
        f"{published.bundle_key}/{name}": a["sha256"] for name, a in manifest["artifacts"].items()
    }
    states = {
        f["target"]["target-id"]: (f["target"]["status"]["state"], {p["name"]: p["value"] for p in f["props"]})
        for f in result["findings"]
    }
    assert {target: state for target, (state, _) in states.items()} == {
        "au-9_obj": "satisfied",
        "au-10_obj": "satisfied",
        "au-11_obj": "satisfied",
        "si-7_obj": "satisfied",
    }
    assert all(props["freshness"] == "fresh" and props["evidence-age-days"] == "0" for _, props in states.values())

    later = _assessment(assess("later", "--at", "2027-04-25T08:00:00Z"))  # 100 days after it was witnessed
    freshness = {
        f["target"]["target-id"]: {p["name"]: p["value"] for p in f["props"]}["freshness"] for f in later["findings"]
    }
    assert freshness == {"au-9_obj": "stale", "au-10_obj": "stale", "au-11_obj": "fresh", "si-7_obj": "stale"}

    proof = tlog_proof_path(published.bundle_key)
    with tarfile.open(path) as tar:
        parsed = parse_tlog_proof(tar.extractfile(proof).read())
    flipped = _rewritten(
        path,
        tmp_path / "flipped.tar",
        proof,
        dataclasses.replace(parsed, hashes=(bytes(32),) + parsed.hashes[1:]).encode(),
    )
    broken = _assessment(assess("broken", file=flipped))
    targets = {f["target"]["target-id"]: f["target"]["status"]["state"] for f in broken["findings"]}
    assert targets["au-9_obj"] == "not-satisfied" and targets["au-10_obj"] == "satisfied"
    assert {p["name"]: p["value"] for p in broken["observations"][0]["props"]}["time-source"] == "ledger-publication"


def test_an_audit_package_carries_one_assessment_results_of_all_its_tenant_months(local_runtime, tmp_path):
    """`evidence export`: assessment-results/package.json, valid OSCAL (trestle) with one result per tenant-month,
    each the tenant-month's own document's, the same bytes on a re-export, under the package signature, checked by
    `verify --package` against them. Before: one document per tenant-month only."""
    runtime, witness, witness_vkey = _with_witness(local_runtime)
    months = [m for m in FIXTURE_MONTHS if m.tenant == "acme-books"]
    assert len(months) > 1
    for number, month in enumerate(months):
        run_tenant_month(runtime, month, RunInfo(f"run-{number}"))
    cosigned_checkpoint(runtime, witness)
    first, second = tmp_path / "first", tmp_path / "second"
    for out in (first, second):
        export(runtime.settings.home, out, 1, f"https://witness.invalid {witness_vkey}")
    path = "assessment-results/package.json"
    assert (first / path).read_bytes() == (second / path).read_bytes()
    document = json.loads((first / path).read_text())
    AssessmentResults.model_validate(document["assessment-results"])
    index = open_package(str(first))[1]
    monthly = [
        json.loads((first / f"assessment-results/{b.removeprefix('bundles/')}.json").read_text()) for b in index.bundles
    ]
    assert [r["start"][:7] for r in document["assessment-results"]["results"]] == sorted(m.period for m in months)
    assert document["assessment-results"]["results"] == [m["assessment-results"]["results"][0] for m in monthly]
    assert path in index.signed.subjects
    pins = ["--witness", witness_vkey, "--workers", "1"]
    code, report = verify(first, *pins)
    assert code == 0 and ("package_assessment_results", True) in [(c["name"], c["passed"]) for c in report["checks"]]

    document["assessment-results"]["results"].pop()  # a month left out, re-signed with the operator's own key
    (first / path).chmod(0o644)
    (first / path).write_text(json.dumps(document))
    resign(first, runtime)
    code, report = verify(first, *pins)
    assert code == 1 and report["codes"] == ["ASSESSMENT_MISMATCH"]


def test_the_operators_controls_mapping_is_a_setting_of_export(local_runtime, tmp_path):
    """EVIDENCE_OSCAL_CONTROLS (or `export --controls FILE`) names the mapping the package's assessment results
    use; a malformed one is refused, CONFIG_INVALID with what the form is, before anything is written. Before:
    export used the default mapping, whatever the operator owned."""
    runtime = local_runtime
    run_tenant_month(runtime, FIXTURE_MONTHS[0], RunInfo("run-1"))
    publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring)
    mapping = tmp_path / "controls.json"
    mapping.write_text(
        json.dumps(
            {
                "catalog": "https://example.test/catalog.json",
                "controls": [
                    {
                        "control_id": "cc7-2",
                        "title": "Monitoring",
                        "max_age_days": 31,
                        "checks": ["statement_signature"],
                    }
                ],
            }
        )
    )
    env = {"EVIDENCE_HOME": str(runtime.settings.home)}

    def export_to(out: str, *args: str, **extra: str):
        result = CliRunner().invoke(
            main, ["export", "--tenant", "acme-books", *args, str(tmp_path / out)], env=env | extra
        )
        assert "Traceback" not in result.output, result.output
        return result

    def controls(out: str) -> list[str]:
        document = json.loads((tmp_path / out / "assessment-results/package.json").read_text())
        AssessmentResults.model_validate(document["assessment-results"])
        assert document["assessment-results"]["import-ap"]["href"] == (
            "https://example.test/catalog.json" if out != "default" else DEFAULT_CONTROLS["catalog"]
        )
        return [f["target"]["target-id"] for r in document["assessment-results"]["results"] for f in r["findings"]]

    assert export_to("default").exit_code == 0
    assert controls("default") == [f"{c['control_id']}_obj" for c in DEFAULT_CONTROLS["controls"]]
    assert export_to("setting", EVIDENCE_OSCAL_CONTROLS=str(mapping)).exit_code == 0
    assert controls("setting") == ["cc7-2_obj"]
    assert export_to("flag", "--controls", str(mapping)).exit_code == 0
    assert controls("flag") == ["cc7-2_obj"]

    malformed = tmp_path / "malformed.json"
    malformed.write_text(json.dumps({"catalog": "x", "controls": [{"control_id": "au-9", "checks": []}]}))
    refused = export_to("refused", EVIDENCE_OSCAL_CONTROLS=str(malformed))
    assert refused.exit_code != 0 and "CONFIG_INVALID" in refused.output
    assert "malformed.json is not a controls mapping" in refused.output and not (tmp_path / "refused").exists()
    unreadable = export_to("unreadable", "--controls", str(tmp_path / "absent.json"))
    assert unreadable.exit_code != 0 and "CONFIG_INVALID" in unreadable.output


def test_an_audit_sample_is_drawn_from_a_witnessed_root(local_runtime, tmp_path):
    """`evidence audit sample --checkpoint N --count K`: the same sample every time, the one the documented draw
    gives from the root (re-implemented here from the docs), only from a note the pinned witness co-signed.
    Before: no such command (usage error)."""
    runtime, witness, witness_vkey = _with_witness(local_runtime)
    for number, month in enumerate(FIXTURE_MONTHS):
        run_tenant_month(runtime, month, RunInfo(f"run-{number}"))
    checkpoint = cosigned_checkpoint(runtime, witness)
    env = {"EVIDENCE_HOME": str(runtime.settings.home)}

    def sample(*args: str) -> tuple[int, dict]:
        result = CliRunner().invoke(
            main, ["audit", "sample", "--checkpoint", str(checkpoint["size"]), "--json", *args], env=env
        )
        assert "Traceback" not in result.output, result.output
        return result.exit_code, json.loads(result.output)

    code, drawn = sample("--count", "2", "--witness", witness_vkey)
    assert code == 0 and drawn["witnessed"] is True and drawn["root_sha256"] == checkpoint["root_sha256"]
    assert sample("--count", "2", "--witness", witness_vkey)[1] == drawn
    population = sorted({(m.tenant, m.period) for m in FIXTURE_MONTHS})
    assert drawn["population"] == len(population)
    assert [(s["tenant"], s["period"]) for s in drawn["sample"]] == _documented_draw(
        bytes.fromhex(checkpoint["root_sha256"]), population, 2
    )
    assert len(sample("--count", "99", "--witness", witness_vkey)[1]["sample"]) == len(population)
    stranger = verifier("witness.test/stranger", COSIGNATURE_V1, ed25519.Ed25519PrivateKey.generate()).vkey()
    code, refused = sample("--count", "2", "--witness", stranger)
    assert code == 1 and refused["error"]["code"] == "WITNESS_POLICY_NOT_MET"
    assert sample("--count", "2")[1]["witnessed"] is False  # nothing pinned, no witness configured: it says so


def _documented_draw(root: bytes, population: list, count: int) -> list:
    """The sampling rule of docs/auditors/oscal.md (Sampling tenant-months), written from the text."""
    import hashlib

    items, j = list(population), 0
    for i in range(min(count, len(items))):
        n = len(items) - i
        while True:
            h = int.from_bytes(
                hashlib.sha256(b"evidence-pipeline/audit-sample/v1\n" + root + j.to_bytes(8, "big")).digest(), "big"
            )
            j += 1
            if h < 2**256 - 2**256 % n:
                break
        k = i + h % n
        items[i], items[k] = items[k], items[i]
    return items[:count]


def test_an_audit_package_carries_each_tenant_months_assessment_results_signed(local_runtime, tmp_path):
    """`evidence export`: assessment-results/<tenant>/<period>/<identity>.json per bundle, under the package
    signature, the same bytes on a re-export, checked by `verify --package` against its bundle. Before: none."""
    runtime, witness, witness_vkey = _with_witness(local_runtime)
    month = FIXTURE_MONTHS[0]
    published = run_tenant_month(runtime, month, RunInfo("run-1"))
    cosigned_checkpoint(runtime, witness)
    first, second = tmp_path / "first", tmp_path / "second"
    for out in (first, second):
        export(runtime.settings.home, out, 1, f"https://witness.invalid {witness_vkey}")
    path = f"assessment-results/{published.bundle_key.removeprefix('bundles/')}.json"
    assert (first / path).read_bytes() == (second / path).read_bytes()
    result = _assessment(first / path)
    assert {f["target"]["status"]["state"] for f in result["findings"]} == {"satisfied"}
    assert result["observations"][0]["collected"] == "2027-01-15T08:00:00Z"
    assert path in open_package(str(first))[1].signed.subjects
    pins = ["--witness", witness_vkey, "--workers", "1"]
    code, report = verify(first, *pins)
    (bundle,) = report["bundles"]
    assert code == 0 and ("assessment_results", True) in [(c["name"], c["passed"]) for c in bundle["checks"]]

    document = json.loads((first / path).read_text())
    document["assessment-results"]["results"][0]["observations"][0]["relevant-evidence"][0]["props"][0]["value"] = (
        "0" * 64
    )
    (first / path).chmod(0o644)
    (first / path).write_text(json.dumps(document))
    resign(first, runtime)  # the operator's own key: only the check against the bundle catches it
    code, report = verify(first, *pins)
    assert code == 1 and report["codes"] == ["ASSESSMENT_MISMATCH"]
