"""Truthful per-partition provenance for range runs: a version-guarded wrapper of Dagster's materialization events.

In Dagster 1.13.27 every partition materialized by one step gets the same provenance tags: one data version
(the code version hashed with the upstream asset's latest data version, whatever partition that was) and one
input event pointer, so a 2026-09 bundle would point at a 2026-08 report's event. Dagster has no per-partition
data version (``MaterializeResult.data_version`` is per step) and no hook between building the events and storing
them, hence this wrapper of ``execute_step._get_output_asset_events``: the assets ``record`` each partition's data
version (derived from its own digests) and the exact upstream events they read, and the wrapper writes them into
that partition's event tags. Everything else in the events is Dagster's.

The same wrapper lets a range step materialize a subset of its partitions (Dagster 1.13 has no per-partition
`MaterializeResult`; a step that returns one materializes its whole range): the partitions a step names as
``not_materialized`` get no materialization event, so the step succeeds, its later assets run for the partitions
it did materialize, and the tenant-months that failed are recorded for themselves alone (assets.py).

It applies only to the exact version and source it was checked against; otherwise it warns and leaves Dagster
alone (the provenance tags are then Dagster's own, coarse ones). test_provenance.py fails until it is re-checked.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from dagster import AssetKey, AssetMaterialization, AssetObservation
from dagster._core.definitions.data_version import (
    DATA_VERSION_IS_USER_PROVIDED_TAG,
    DATA_VERSION_TAG,
    get_input_data_version_tag,
    get_input_event_pointer_tag,
)
from dagster._core.execution.plan import execute_step

from evidence_pipeline.defs.extensions.guard import patch

# sha256 of inspect.getsource(execute_step._get_output_asset_events) in dagster==1.13.27.
CHECKED_SOURCE_SHA256 = "0ac11bd7e5d1f977a6b9c2ce657835a684f678b952dd62d450a93dcee0f1b642"

_dagster_output_asset_events = execute_step._get_output_asset_events
_DAGSTER_SIGNATURE = inspect.signature(_dagster_output_asset_events)


class Upstream(NamedTuple):
    """The materialization of an upstream partition that an asset read: its event's storage id and data version."""

    storage_id: int
    data_version: str | None


def upstream_of(record) -> Upstream:
    """The ``Upstream`` of an ``EventLogRecord`` of a materialization."""
    return Upstream(record.storage_id, (record.asset_materialization.tags or {}).get(DATA_VERSION_TAG))


def provenance_tags(data_version: str, inputs: Mapping[AssetKey, Upstream]) -> dict[str, str]:
    """The tags Dagster reads a materialization's data version and lineage from."""
    tags = {DATA_VERSION_TAG: data_version, DATA_VERSION_IS_USER_PROVIDED_TAG: "true"}
    for key, upstream in inputs.items():
        tags[get_input_event_pointer_tag(key)] = str(upstream.storage_id)
        if upstream.data_version is not None:
            tags[get_input_data_version_tag(key)] = upstream.data_version
    return tags


_recorded: dict[tuple[str, AssetKey, str], dict[str, str]] = {}  # (run id, asset, partition) -> tags
_withheld: set[tuple[str, AssetKey, str]] = set()  # (run id, asset, partition) that the step did not materialize


def record(run_id: str, asset_key: AssetKey, partition: str, tags: dict[str, str]) -> None:
    """Provenance for the materialization of ``partition`` that this run's step is about to emit."""
    _recorded[(run_id, asset_key, partition)] = tags


def not_materialized(run_id: str, asset_key: AssetKey, partitions) -> None:
    """The partitions of this run's step that must get no materialization when it returns its result."""
    _withheld.update((run_id, asset_key, str(partition)) for partition in partitions)


def installed() -> bool:
    """True when the wrapper is in force: only then can a range step materialize a subset of its partitions."""
    return execute_step._get_output_asset_events is _output_asset_events


def _output_asset_events(*args: Any, **kwargs: Any) -> Iterator[AssetMaterialization | AssetObservation]:
    """Dagster's events, with each partition's recorded provenance. Dagster passes its seven arguments
    positionally (execute_step.py): they are passed on as they came, and the two read here are found by name."""
    arguments = _DAGSTER_SIGNATURE.bind(*args, **kwargs).arguments
    asset_key, step_context = arguments["asset_key"], arguments["step_context"]
    for event in _dagster_output_asset_events(*args, **kwargs):
        if isinstance(event, AssetMaterialization) and event.partition is not None:
            key = (step_context.run_id, asset_key, str(event.partition))
            if key in _withheld:
                _withheld.discard(key)
                continue
            tags = _recorded.pop(key, None)
            if tags is not None:
                event = event._replace(tags={**event.tags, **tags})
        yield event


def install() -> bool:
    """Wrap Dagster's event builder if Dagster is the checked version; True when installed."""
    return patch(
        execute_step,
        "_get_output_asset_events",
        _output_asset_events,
        what=__name__,
        consequence="range runs keep Dagster's per-step provenance tags",
        sources={_dagster_output_asset_events: CHECKED_SOURCE_SHA256},
    )
