"""Review rulesets: versioned, content-addressed JSON files in the repository (``evidence_pipeline/rulesets/``).

A ruleset names the fields a contract must state and the rules its values must pass. Each version is registered
here with the sha256 of its file: a loaded file whose bytes differ from its registered digest is refused
(RULESET_INVALID), so changing a ruleset means adding a new version, never silently editing an old one.
A job pins the version and digest in force when it is accepted (its options), and the worker refuses to review
under anything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evidence_pipeline import jsonread
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.store import sha256_hex

RULESETS_DIR = Path(__file__).resolve().parent.parent / "rulesets"
SCHEMA = "evidence-ruleset/v1"
# version -> sha256 of its file. Released versions never change; a new one is added (and put in force) instead.
REGISTERED = {
    "lease-review/2026.1": "7fe08c0b5442bfb82b90da4431042136ab727a4ce80b98ace625115ab5f5a184",
}
IN_FORCE = "lease-review/2026.1"  # what a job accepted now is pinned to, unless it names another registered version
FIELD_TYPES = ("text", "date", "money")
CHECKS = ("well_formed", "dates_in_order", "term_months", "positive", "parties_signed", "clauses_present")


@dataclass(frozen=True)
class Field:
    name: str
    label: str
    type: str
    repeated: bool  # tenant_1, tenant_2, …: at least the first is required


@dataclass(frozen=True)
class Ruleset:
    version: str
    sha256: str
    fields: tuple[Field, ...]
    rules: tuple[dict, ...]  # each: "id", "check" (one of CHECKS) and the check's parameters


def file_name(version: str) -> str:
    return version.replace("/", "-") + ".json"


def versions() -> tuple[str, ...]:
    """Every registered version, the one in force first (an option schema's default comes first)."""
    return (IN_FORCE, *sorted(set(REGISTERED) - {IN_FORCE}))


def pin(version: str) -> dict[str, str]:
    """What a job accepted under ``version`` records: the version and its registered digest."""
    return {"ruleset": version, "ruleset_sha256": REGISTERED[version]}


def load(version: str, expected_sha256: str, directory: Path = RULESETS_DIR) -> Ruleset:
    """The ruleset of ``version``, refused unless its file's sha256 is the one registered and ``expected_sha256``
    (the job's pin)."""
    registered = REGISTERED.get(version)
    if registered is None:
        raise EvidenceError(ReasonCode.RULESET_INVALID, f"ruleset {version[:64]!r} is not registered")
    try:
        data = (directory / file_name(version)).read_bytes()
    except OSError as error:
        reason = error.strerror
        raise EvidenceError(ReasonCode.RULESET_INVALID, f"ruleset {version} cannot be read ({reason})") from None
    digest = sha256_hex(data)
    if digest != registered or digest != expected_sha256:
        raise EvidenceError(
            ReasonCode.RULESET_INVALID,
            f"ruleset {version} has sha256 {digest[:12]}, registered {registered[:12]}, pinned {expected_sha256[:12]}",
        )
    return _parse(version, digest, jsonread.loads(data, ReasonCode.RULESET_INVALID, f"ruleset {version}"))


def _parse(version: str, digest: str, document) -> Ruleset:
    def refuse(what: str) -> EvidenceError:
        return EvidenceError(ReasonCode.RULESET_INVALID, f"ruleset {version}: {what}")

    if not isinstance(document, dict) or document.get("schema") != SCHEMA or document.get("ruleset") != version:
        raise refuse(f"not a {SCHEMA} document of this version")
    fields = []
    for spec in document.get("fields", []):
        if not isinstance(spec, dict) or spec.get("type") not in FIELD_TYPES:
            raise refuse("a field has no known type")
        fields.append(Field(spec["name"], spec["label"], spec["type"], bool(spec.get("repeated", False))))
    rules = tuple(document.get("rules", []))
    if not fields or not rules or any(not isinstance(r, dict) or r.get("check") not in CHECKS for r in rules):
        raise refuse("no fields, no rules, or a rule with an unknown check")
    return Ruleset(version, digest, tuple(fields), rules)
