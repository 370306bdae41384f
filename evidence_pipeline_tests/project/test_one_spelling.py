"""Canonical JSON, the chain link and UTC ISO times are each spelled once (canonical.py, ledger/chain.py), and the
legacy ASCII form that persisted ids were derived from still gives the ids it always gave."""

import ast
from pathlib import Path

from evidence_pipeline.actors.requests import digest
from evidence_pipeline.ledger.jobs import JobKey, document_job_id, replay_attempt_id

PACKAGE = Path(__file__).resolve().parents[2] / "evidence_pipeline"
CANONICAL, CHAIN = PACKAGE / "canonical.py", PACKAGE / "ledger" / "chain.py"


def _calls(path: Path):
    return (node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call))


def _named(node: ast.expr, *names: str) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in names


def _offenders(home: Path, spells) -> list[str]:
    return sorted(
        {
            str(path.relative_to(PACKAGE))
            for path in PACKAGE.rglob("*.py")
            if path != home and any(spells(call) for call in _calls(path))
        }
    )


def _compact_sorted_json(call: ast.Call) -> bool:
    """json.dumps(..., sort_keys=True, separators=...): a canonical form spelled in place."""
    keywords = {keyword.arg for keyword in call.keywords}
    return _named(call.func, "dumps") and {"sort_keys", "separators"} <= keywords


def _chain_link(call: ast.Call) -> bool:
    """sha256(bytes.fromhex(prev) + body): the chain's link spelled in place."""
    return (
        _named(call.func, "sha256")
        and len(call.args) == 1
        and isinstance(call.args[0], ast.BinOp)
        and isinstance(call.args[0].left, ast.Call)
        and _named(call.args[0].left.func, "fromhex")
    )


def _utc_iso(call: ast.Call) -> bool:
    """datetime.now(...).isoformat(...) or datetime.fromtimestamp(...).isoformat(...): a UTC time spelled in place."""
    return (
        _named(call.func, "isoformat")
        and isinstance(call.func.value, ast.Call)
        and _named(call.func.value.func, "now", "fromtimestamp")
    )


def test_canonical_json_the_chain_link_and_utc_times_are_spelled_once():
    assert _offenders(CANONICAL, _compact_sorted_json) == []
    assert _offenders(CHAIN, _chain_link) == []
    assert _offenders(CANONICAL, _utc_iso) == []
    # the scans themselves see what they look for
    assert any(map(_compact_sorted_json, _calls(CANONICAL))) and any(map(_utc_iso, _calls(CANONICAL)))
    assert any(map(_chain_link, _calls(CHAIN)))


def test_ids_derived_from_the_legacy_ascii_form_never_change():
    """Job ids, replay attempt ids and refusal digests are persisted and named by events: these are the values the
    code gave before the spellings were gathered (non-ASCII input, where the ASCII form differs from canonical)."""
    assert document_job_id("acme-books", "clé-1", "bat_1") == (
        "93ef92ef637bd7289aafd83b52ba22c80079140f056b38a7eecc1f72339ac0b9"
    )
    assert replay_attempt_id("a" * 64, "b" * 64) == "46b5e9a7e4808212baec70ad82a84f712474b5443742e0224ceabbb9f08e4bcd"
    assert JobKey("acme-books", "2026-04", "c" * 64, "renderer/1", "policy/ü").job_id == (
        "17072417312d2995f09b926da9fe9d958893a19e288a11b5551692edfcad283e"
    )
    assert digest({"action": "jöb.replay"}) == "edb24a1fded624959782f2b8213cd135d5ade545887332b8e6055d5a146addd0"
