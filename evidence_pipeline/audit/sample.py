"""`evidence audit sample`: an auditor's sample of tenant-months, drawn from a witnessed checkpoint's root, so that
the operator, who cannot change a root once a witness co-signed it, cannot steer which months are sampled.

The population is every tenant-month with a `bundle.published` event among the checkpoint's first ``size`` events,
sorted by (tenant, period). The draw is a Fisher–Yates shuffle of the first ``count`` positions driven by the hash
stream H(j) = sha256("evidence-pipeline/audit-sample/v1\\n" ‖ root ‖ j as 8 bytes big-endian), j = 0, 1, …: for
position i, the next H(j) read as a big-endian integer is taken if it is below the largest multiple of (n - i)
that fits in 256 bits (else the next, so the draw is uniform), and position i swaps with i + H(j) mod (n - i).
Anyone holding the root and the population re-draws the same sample by hand.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from evidence_pipeline.audit.checkpoints import CheckpointKeys, checkpoint_key
from evidence_pipeline.audit.witnessing import NotePins, archive_note, check_notes
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger import Ledger, merkle
from evidence_pipeline.store import ArtifactStore
from evidence_pipeline.witness.policy import TlogPolicy

DOMAIN = b"evidence-pipeline/audit-sample/v1\n"
Drawn = TypeVar("Drawn")  # a member of the population


def draw(root: bytes, population: list[Drawn], count: int) -> list[Drawn]:
    """The first ``count`` of ``population`` (all of it, when smaller) after the shuffle described above."""
    chosen, stream = list(population), _stream(root)
    for i in range(min(count, len(chosen))):
        span = len(chosen) - i
        limit = (1 << 256) - (1 << 256) % span
        value = next(value for value in stream if value < limit)
        j = i + value % span
        chosen[i], chosen[j] = chosen[j], chosen[i]
    return chosen[:count]


def _stream(root: bytes) -> Iterator[int]:
    counter = 0
    while True:
        yield int.from_bytes(hashlib.sha256(DOMAIN + root + counter.to_bytes(8, "big")).digest(), "big")
        counter += 1


@dataclass(frozen=True)
class Sample:
    size: int
    root: bytes
    witnessed: bool  # the checkpoint's note met the witness policy
    population: int
    tenant_months: list[tuple[str, str]]


def sample_archive(
    ledger: Ledger, archive: ArtifactStore, *, size: int, count: int, origin: str, policy: TlogPolicy | None
) -> Sample:
    """The sample from the deployment's checkpoint of ``size``: its envelope verified by a statement key, its root
    the ledger's over its first ``size`` events, and, with a ``policy`` (the auditor's, or the configured
    witnesses), its note of ``origin`` co-signed as the policy asks (WITNESS_POLICY_NOT_MET otherwise)."""
    key = checkpoint_key(size)
    if not archive.exists(key):
        raise EvidenceError(ReasonCode.LEDGER_NOT_CHECKPOINTED, f"no checkpoint of size {size} is published")
    keys = CheckpointKeys.of(archive)
    checkpoint = keys.read(archive, key)
    root = bytes.fromhex(checkpoint["root_sha256"])
    numbered = ledger.leaves()
    if len(numbered) < size or merkle.Tree([leaf for _, leaf in numbered[:size]]).root(0, size) != root:
        raise EvidenceError(ReasonCode.LEDGER_INVALID, f"the ledger's first {size} events are not checkpoint {size}'s")
    if policy is not None:
        for _, error in check_notes(
            [checkpoint], partial(archive_note, archive), keys.keys, NotePins(origin, policy, size)
        ):
            if error is not None:
                raise error
    covered = {seq for seq, _ in numbered[:size]}
    population = sorted(
        {(tenant, period) for seq, tenant, period in ledger.published_tenant_months() if seq in covered}
    )
    return Sample(size, root, policy is not None, len(population), draw(root, population, count))
