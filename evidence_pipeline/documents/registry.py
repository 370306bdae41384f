"""Operations register themselves here: a name, an option schema, how many inputs they take, and a processor.

A processor is a plain function (opened, gated inputs + normalized options + the policy pinned at acceptance ->
outputs and findings) that knows nothing of HTTP or Dagster. Intake validates requests against the schema (and
records what the operation pins at acceptance: a review's ruleset digest in the options, a redaction's template
version beside them); the document worker runs the processor, and then the operation's independent verify pass
when it has one. The built-in operations are imported on first lookup.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

from evidence_pipeline.canonical import canonical, sha256_text
from evidence_pipeline.documents.gate import GATE_CODES, GatedDocument
from evidence_pipeline.errors import EvidenceError, ReasonCode

_BUILTIN = (
    "evidence_pipeline.documents.inspect",
    "evidence_pipeline.documents.review",
    "evidence_pipeline.documents.redact",
    "evidence_pipeline.documents.derive",
)
_REGISTRY: dict[str, Operation] = {}
# The gate's policy for active content, an option of every operation that reads a document: refuse it, or flag it
ACTIVE_CONTENT_OPTION = {"active_content": ("refuse", "flag")}


@dataclass(frozen=True)
class ProcessorInput:
    """One input document after the worker-side gate."""

    document_id: str
    sha256: str
    size: int
    gated: GatedDocument
    file: BinaryIO  # its bytes, digest-checked, in the attempt's private directory


@dataclass(frozen=True)
class Derivative:
    """A new document a processor made from its inputs (a split's part, a merge): the worker publishes it
    content-addressed, with its lineage, as an artifact that later jobs can take as an input."""

    name: str  # a slug, unique within the job
    data: bytes
    parents: tuple[str, ...]  # the ids of the inputs it was made from, in order
    facts: dict  # what else its manifest records about it (a part's pages)


@dataclass(frozen=True)
class ProcessorResult:
    artifacts: dict[str, bytes]  # file name -> bytes, published put-once under the job's prefix
    summary: dict  # what the ledger event and the job status report about the outcome
    secret: dict = field(default_factory=dict)  # what only the verify pass sees (values removed); never published
    signed: str | None = None  # publish the input with the service's approval signature appended, under this name
    rejected: str | None = None  # a decision against the input: the job is rejected with this code, outputs kept
    message: str | None = None  # what the rejection means for this input: names and counts, never a value
    derived: tuple[Derivative, ...] = ()  # new documents, published with their lineage


@dataclass(frozen=True)
class Structured:
    """An option whose value is JSON rather than one of enumerated strings (a split's parts): ``parse`` returns it
    normalized or raises OPTIONS_INVALID. An option without a default must be given."""

    parse: Callable[[object], object]
    describe: str  # what the option takes, for the refusal of a missing one
    default: object = None


@dataclass(frozen=True)
class Operation:
    name: str
    processor: Callable
    # option -> its allowed values (the first is the default), or a Structured option
    options: dict[str, tuple[str, ...] | Structured] = field(default_factory=dict)
    inputs: tuple[int, int] = (1, 1)  # least and most input documents
    pin: Callable[[dict], dict] | None = None  # normalized options -> what acceptance pins beside them
    # (ledger, tenant) -> option values a tenant's new job gets unless it names them (a ruleset canary's route)
    route: Callable | None = None
    staged: bool = False  # record each stage of a job (validating, reviewing, signing, committing) in the ledger
    processing_stage: str = "reviewing"  # the stage in which the processor runs
    outcomes: frozenset[str] = frozenset()  # terminal codes that are decisions about the input, like the gate's
    # (ledger, tenant) -> request fields fixed when a job is accepted, outside the options and the request digest
    # (the processor gets them as ``pinned``)
    pin_policy: Callable | None = None
    # the reason code of an input that is gone (or not the bytes admitted), when the operation names its own; a
    # gate refusal keeps the gate's code
    input_refused: str | None = None
    # a second, independent pass over the written outputs: (artifact name -> written file, result) -> its
    # record (in the summary as ``verification``); it raises a terminal EvidenceError to stop publication
    verify: Callable | None = None
    # (Documents, tenant, input ids) -> what acceptance pins beside the options after checking the inputs (a
    # merge's approving reviews); it raises the refusal's EvidenceError
    admit_inputs: Callable | None = None
    # run the signature check stage on the input before the processor (its record id is in every derivative's
    # lineage)
    signature_check: bool = False
    # writes a new PDF from its input or signs it: an input encrypted for its permissions only is refused
    writes: bool = True

    def normalize(self, options) -> dict:
        """Every option with its value (defaults filled in), or OPTIONS_INVALID."""
        if not isinstance(options, dict):
            raise EvidenceError(ReasonCode.OPTIONS_INVALID, "options must be a JSON object")
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise EvidenceError(ReasonCode.OPTIONS_INVALID, f"{self.name} takes no option {unknown[0][:64]!r}")
        normalized = {name: self._value(name, spec, options) for name, spec in self.options.items()}
        return normalized | (self.pin(normalized) if self.pin else {})

    def _value(self, name: str, spec: tuple[str, ...] | Structured, options: dict):
        if isinstance(spec, Structured):
            if name in options:
                return spec.parse(options[name])
            if spec.default is None:
                raise EvidenceError(ReasonCode.OPTIONS_INVALID, f"{self.name} needs option {name}: {spec.describe}")
            return spec.default
        if name in options and options[name] not in spec:
            raise EvidenceError(
                ReasonCode.OPTIONS_INVALID, f"{self.name} option {name} must be one of " + ", ".join(spec)
            )
        return options.get(name, spec[0])


def register(operation: Operation) -> Operation:
    if operation.name in _REGISTRY:
        raise ValueError(f"operation {operation.name} is registered twice")
    _REGISTRY[operation.name] = operation
    return operation


def _load_builtins() -> None:
    for module in _BUILTIN:  # imported once (then found in sys.modules), whichever was imported first
        importlib.import_module(module)


def operation(name) -> Operation:
    _load_builtins()
    if not isinstance(name, str) or name not in _REGISTRY:
        raise EvidenceError(ReasonCode.OPERATION_UNKNOWN, "unknown operation; known: " + ", ".join(sorted(_REGISTRY)))
    return _REGISTRY[name]


def outcome_codes() -> frozenset[str]:
    """Terminal codes that are a job's outcome (a decision about its input), not a failure of the run."""
    _load_builtins()
    return GATE_CODES.union(*(op.outcomes for op in _REGISTRY.values()))


def request_digest(tenant: str, op: Operation, inputs: list, options: dict, policy_version: str) -> str:
    """The sha256 of the canonical encoding of what was asked: an idempotency key stands for exactly this."""
    return sha256_text(
        canonical(
            {
                "tenant": tenant,
                "operation": op.name,
                "inputs": inputs,
                "options": options,
                "policy_version": policy_version,
            }
        )
    )
