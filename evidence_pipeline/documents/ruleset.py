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
    "lease-review/2026.1": "564d0a62e84610fad6f35d9a2fd74f837100bb57811d246961b0c24caa188649",
    "lease-review/2026.2": "6d8918ed98fbee7a4a62b0618a777aaf5b38d501e25f88b3462ff0376ac4ade1",  # a pets clause too
    # district services agreements, part by part: a job names it in its options (never in force for leases)
    "district-agreement/2026.1": "d05a7760ee16b69c763aadd6fdd2fd9401459d5354f0318d7d370ddb1a89662f",
}
IN_FORCE = "lease-review/2026.1"  # what a job accepted now is pinned to, unless it names another registered version
FIELD_TYPES = ("text", "date", "money", "signer")  # signer: "Name (Party signed for)"
# check -> the parameters a rule of it must give (documents/review.py implements each check)
CHECKS = {
    "well_formed": (),
    "dates_in_order": ("fields",),
    "term_months": ("start", "end", "min", "max"),
    "positive": ("field",),
    "parties_signed": ("parties",),
    "clauses_present": ("clauses",),
}


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


def load_candidate(path: Path) -> Ruleset:
    """A candidate ruleset from a file that need not be registered yet (shadow runs). A registered version whose
    bytes differ is refused: a candidate must be a new version."""
    try:
        data = path.read_bytes()
    except OSError as error:
        reason = error.strerror
        raise EvidenceError(ReasonCode.RULESET_INVALID, f"the candidate ruleset cannot be read ({reason})") from None
    document = jsonread.loads(data, ReasonCode.RULESET_INVALID, "the candidate ruleset")
    version = document.get("ruleset") if isinstance(document, dict) else None
    if not isinstance(version, str) or not version:
        raise EvidenceError(ReasonCode.RULESET_INVALID, "the candidate ruleset names no version")
    digest = sha256_hex(data)
    if REGISTERED.get(version, digest) != digest:
        raise EvidenceError(
            ReasonCode.RULESET_INVALID, f"ruleset {version[:64]} is registered with other bytes: name a new version"
        )
    return _parse(version, digest, document)


def _parse(version: str, digest: str, document) -> Ruleset:
    def refuse(what: str) -> EvidenceError:
        return EvidenceError(ReasonCode.RULESET_INVALID, f"ruleset {version}: {what}")

    if not isinstance(document, dict) or document.get("schema") != SCHEMA or document.get("ruleset") != version:
        raise refuse(f"not a {SCHEMA} document of this version")
    fields = []
    for spec in document.get("fields", []):
        if not (
            isinstance(spec, dict)
            and spec.get("type") in FIELD_TYPES
            and all(isinstance(spec.get(key), str) for key in ("name", "label"))
        ):
            raise refuse("a field needs a name, a label and a known type")
        fields.append(Field(spec["name"], spec["label"], spec["type"], bool(spec.get("repeated", False))))
    rules = tuple(document.get("rules", []))
    if not fields or not rules:
        raise refuse("no fields or no rules")
    for rule in rules:
        if not (
            isinstance(rule, dict)
            and isinstance(rule.get("id"), str)
            and rule.get("check") in CHECKS
            and all(key in rule for key in CHECKS[rule["check"]])
        ):
            raise refuse("a rule needs an id, a known check and that check's parameters")
    return Ruleset(version, digest, tuple(fields), rules)
