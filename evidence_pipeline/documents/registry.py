"""Operations register themselves here: a name, an option schema, how many inputs they take, and a processor.

A processor is a plain function (opened, gated inputs + normalized options + the policy pinned at acceptance ->
outputs and findings) that knows nothing of HTTP or Dagster. Intake validates requests against the schema; the
document worker runs the processor, and then the operation's independent verify pass when it has one. The built-in
operations are imported on first lookup.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

from evidence_pipeline.documents.gate import GatedDocument
from evidence_pipeline.errors import EvidenceError, ReasonCode

_BUILTIN = ("evidence_pipeline.documents.inspect", "evidence_pipeline.documents.redact")
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
    file: BinaryIO  # the fetched bytes (digest checked), open while the processor runs


@dataclass(frozen=True)
class ProcessorResult:
    artifacts: dict[str, bytes]  # file name -> bytes, published put-once under the job's prefix
    summary: dict  # what the ledger event and the job status report about the outcome
    secret: dict = field(default_factory=dict)  # what only the verify pass sees (values removed); never published


@dataclass(frozen=True)
class Operation:
    name: str
    processor: Callable
    options: dict[str, tuple[str, ...]] = field(default_factory=dict)  # option -> allowed values; first is default
    inputs: tuple[int, int] = (1, 1)  # least and most input documents
    # (ledger, tenant) -> request fields fixed when a job is accepted (the processor gets them as ``pinned``)
    pin_policy: Callable | None = None
    # the reason code of an input that is gone or refused by the gate, when the operation names its own
    input_refused: str | None = None
    # a second, independent pass over the written outputs: (artifact name -> written file, result) -> its
    # record (in the summary as ``verification``); it raises a terminal EvidenceError to stop publication
    verify: Callable | None = None

    def normalize(self, options) -> dict[str, str]:
        """Every option with its value (defaults filled in), or OPTIONS_INVALID."""
        if not isinstance(options, dict):
            raise EvidenceError(ReasonCode.OPTIONS_INVALID, "options must be a JSON object")
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise EvidenceError(ReasonCode.OPTIONS_INVALID, f"{self.name} takes no option {unknown[0][:64]!r}")
        for name, value in options.items():
            if value not in self.options[name]:
                raise EvidenceError(
                    ReasonCode.OPTIONS_INVALID,
                    f"{self.name} option {name} must be one of " + ", ".join(self.options[name]),
                )
        return {name: options.get(name, allowed[0]) for name, allowed in self.options.items()}


def register(operation: Operation) -> Operation:
    if operation.name in _REGISTRY:
        raise ValueError(f"operation {operation.name} is registered twice")
    _REGISTRY[operation.name] = operation
    return operation


def operation(name) -> Operation:
    for module in _BUILTIN:  # cached after the first import; an operation registered elsewhere does not stop them
        importlib.import_module(module)
    if not isinstance(name, str) or name not in _REGISTRY:
        raise EvidenceError(ReasonCode.OPERATION_UNKNOWN, "unknown operation; known: " + ", ".join(sorted(_REGISTRY)))
    return _REGISTRY[name]
