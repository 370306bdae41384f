"""Operations register themselves here: a name, an option schema, how many inputs they take, and a processor.

A processor is a plain function (an opened, gated input + normalized options -> an output and its findings) that
knows nothing of HTTP or Dagster. Intake validates requests against the schema; the document worker runs the
processor. The built-in operations are imported on first lookup.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

from evidence_pipeline.documents.gate import GatedDocument
from evidence_pipeline.errors import EvidenceError, ReasonCode

_BUILTIN = ("evidence_pipeline.documents.inspect",)
_REGISTRY: dict[str, Operation] = {}


@dataclass(frozen=True)
class ProcessorInput:
    """One input document after the worker-side gate."""

    document_id: str
    sha256: str
    size: int
    gated: GatedDocument


@dataclass(frozen=True)
class ProcessorResult:
    artifacts: dict[str, bytes]  # file name -> bytes, published put-once under the job's prefix
    summary: dict  # what the ledger event and the job status report about the outcome


@dataclass(frozen=True)
class Operation:
    name: str
    processor: Callable
    options: dict[str, tuple[str, ...]] = field(default_factory=dict)  # option -> allowed values; first is default
    inputs: tuple[int, int] = (1, 1)  # least and most input documents

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
    if not _REGISTRY:
        for module in _BUILTIN:
            importlib.import_module(module)
    if not isinstance(name, str) or name not in _REGISTRY:
        raise EvidenceError(ReasonCode.OPERATION_UNKNOWN, "unknown operation; known: " + ", ".join(sorted(_REGISTRY)))
    return _REGISTRY[name]
