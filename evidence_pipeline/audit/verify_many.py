"""Every bundle below several locations, verified in worker processes (`evidence verify PREFIX…`).

Locations are resolved and listed first, so a location with no bundle stops the command before any work. The
bundles are then verified in chunks by `parallel.iter_stage` (forked workers, one per CPU by default), each chunk
on a store that its worker opened itself, and come back in order, one Outcome per bundle, as they finish.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, cast

from evidence_pipeline import parallel
from evidence_pipeline.audit.locations import Location, bundles_below
from evidence_pipeline.audit.verify import Verification, verify_bundle
from evidence_pipeline.errors import EXIT_CHECK_FAILED, EXIT_OK, EvidenceError, exit_code
from evidence_pipeline.store import ArtifactStore

CHUNK = 8  # bundles per task: a worker opens its store once per chunk (an S3 client costs tens of ms)


@dataclass(frozen=True)
class Outcome:
    """One bundle's verification, or the error that kept it from being checked (the archive could not be read)."""

    bundle: str  # the user's location, extended to this bundle
    verification: Verification | None = None
    error: EvidenceError | None = None

    @property
    def exit_code(self) -> int:
        if self.verification is not None:
            return EXIT_OK if self.verification.ok else EXIT_CHECK_FAILED
        return exit_code(cast(EvidenceError, self.error).code)  # no verification: the error that kept it

    def as_dict(self) -> dict[str, Any]:
        if self.verification is not None:
            return self.verification.as_dict() | {"bundle": self.bundle}
        error = cast(EvidenceError, self.error)  # no verification: the error that kept the bundle from it
        return {"bundle": self.bundle, "ok": False, "error": {"code": error.code, "message": error.message}}


def overall_exit_code(outcomes: list[Outcome]) -> int:
    """0 when every bundle verified; 1 when any failed a check (a finding is never hidden by an outage elsewhere);
    otherwise the exit code of the errors that kept bundles from being checked (3 when the archive was unavailable)."""
    codes = {outcome.exit_code for outcome in outcomes}
    return EXIT_CHECK_FAILED if EXIT_CHECK_FAILED in codes else max(codes, default=EXIT_OK)


@dataclass(frozen=True)
class _Pins:
    """What every task of one call shares: how to open an archive, and the pinned key and trust root ids."""

    open_archive: Callable[[str], ArtifactStore]
    key_ids: frozenset[str]
    root_ids: frozenset[str]
    at: datetime | None  # the validation time of the PAdES signatures (now when None)
    # More checks of each bundle, after verify_bundle's, in the same worker: also(store, prefix, verification)
    # appends its Checks (an audit package's ledger proofs). A top-level function or a partial of one.
    also: Callable[[ArtifactStore, str, Verification], None] | None = None


def list_bundles(locations: list[Location], open_archive: Callable[[str], ArtifactStore]) -> list[tuple[Location, str]]:
    """(location, bundle prefix) for every bundle at or below each location, each bundle once, in order."""
    found: dict[tuple[str, str], Location] = {}
    for location in locations:
        for prefix in bundles_below(open_archive(location.archive), location):
            found.setdefault((location.archive, prefix), location)
    return [(location, prefix) for (_, prefix), location in found.items()]


def verify_all(
    bundles: list[tuple[Location, str]],
    open_archive: Callable[[str], ArtifactStore],
    *,
    key_ids: frozenset[str],
    root_ids: frozenset[str],
    workers: int,
    at: datetime | None = None,
    also: Callable[[ArtifactStore, str, Verification], None] | None = None,
) -> Iterator[Outcome]:
    """Each bundle's Outcome, in the order given, as soon as it is known. ``open_archive`` (and ``also``) must be
    top-level functions, or partials of them: workers get them by reference."""
    chunks = list(_chunks(bundles, max(1, min(CHUNK, -(-len(bundles) // workers)))))  # every worker gets some
    tasks = [(chunk[0][0].archive, tuple(prefix for _, prefix in chunk)) for chunk in chunks]
    results = parallel.iter_stage(
        partial(_Pins, open_archive, key_ids, root_ids, at, also), _verify_chunk, tasks, workers
    )
    for chunk, result in zip(chunks, results):
        for index, (location, prefix) in enumerate(chunk):
            shown = location.shown(prefix)
            value = result if isinstance(result, EvidenceError) else result[index]  # the store did not open
            if isinstance(value, EvidenceError):
                yield Outcome(shown, error=value)
            else:
                yield Outcome(shown, verification=value)


def _chunks(bundles: list[tuple[Location, str]], size: int) -> Iterator[list[tuple[Location, str]]]:
    """Runs of at most ``size`` bundles of one archive."""
    chunk: list[tuple[Location, str]] = []
    for entry in bundles:
        if chunk and (len(chunk) == size or chunk[0][0].archive != entry[0].archive):
            yield chunk
            chunk = []
        chunk.append(entry)
    if chunk:
        yield chunk


def _verify_chunk(pins: _Pins, task: tuple[str, tuple[str, ...]]) -> list[Verification | EvidenceError]:
    """In a worker: one archive's bundles, each verified, or the error that kept it from being checked."""
    archive, prefixes = task
    store = pins.open_archive(archive)
    return [_verify_one(store, prefix, pins) for prefix in prefixes]


def _verify_one(store: ArtifactStore, prefix: str, pins: _Pins) -> Verification | EvidenceError:
    try:
        verification = verify_bundle(store, prefix, pins.key_ids, pins.root_ids, pins.at)
        if pins.also is not None:
            pins.also(store, prefix, verification)
        return verification
    except EvidenceError as error:  # an outage: no finding about this bundle, and the others still run
        return error
