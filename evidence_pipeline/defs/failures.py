"""What a step that failed for some tenant-months says, in the UI, about them and about the rest of its range.

Dagster OSS records no failed-to-materialize events, so a partition that a step did not materialize says why in an
observation with its reason code and message, on its page of this asset and of every later asset of the run. A
range step that materialized the other partitions goes on (assets.py): only the failed tenant-months get the
observations. A step that materialized nothing fails the run, and Dagster 1.13 then marks every partition the run
planned and did not materialize as failed, for every asset after that step: each of those partitions gets the
observation, and the Failure itself carries a one-line description and a table (tenant, month, code, message):
partition keys contain `|`, which breaks a markdown table.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Set

from dagster import AssetKey, AssetObservation, Failure, MetadataValue, TableColumn, TableRecord, TableSchema

from evidence_pipeline.defs.partitions import tenant_month_of
from evidence_pipeline.errors import EvidenceError, ReasonCode

# What an analyst who backfilled evidence_bundle (or monthly_report) alone is told to select instead.
SELECT_UPSTREAM = (
    "select source_revision, monthly_report and evidence_bundle together (or launch the monthly_evidence job)"
)
# Said before launch, on the asset's page above its Materialize button (its description): Dagster 1.13's launch
# dialog warns of missing upstream partitions only for one-dimensional partitions, and ours are tenant x month.
MATERIALIZE_ALONE = (
    "Materialize… on this page runs this asset alone, which fails UPSTREAM_NOT_MATERIALIZED for "
    f"tenant-months whose upstream was never materialized: {SELECT_UPSTREAM}."
)
NAMED = 5  # tenant-months named in a one-line description; the table holds them all
FAILURE_COLUMNS = TableSchema(
    columns=[TableColumn("tenant"), TableColumn("month"), TableColumn("code"), TableColumn("message")]
)


def failure_table(errors: dict) -> MetadataValue:
    """partition -> EvidenceError as a sortable table: tenant, month, code, message."""
    rows = []
    for key, error in errors.items():
        month = tenant_month_of(key)
        rows.append(
            TableRecord({"tenant": month.tenant, "month": month.period, "code": error.code, "message": error.message})
        )
    return MetadataValue.table(rows, schema=FAILURE_COLUMNS)


def summary(errors: dict) -> str:
    """ "acme-books 2026-10 SOURCE_MISSING, … and 3 more": the tenant-months and their codes, on one line."""
    named = [
        f"{tenant_month_of(key).tenant} {tenant_month_of(key).period} {error.code}"
        for key, error in list(errors.items())[:NAMED]
    ]
    more = f" and {len(errors) - NAMED} more" if len(errors) > NAMED else ""
    return ", ".join(named) + more


def describe(asset: AssetKey, errors: dict, count: int) -> str:
    """ "monthly_report: 1 of 3 tenant-months failed: acme-books 2026-10 REPORT_INVALID"."""
    upstream = any(error.code == ReasonCode.UPSTREAM_NOT_MATERIALIZED for error in errors.values())
    return f"{asset.to_user_string()}: {len(errors)} of {count} tenant-months failed: {summary(errors)}" + (
        f"; {SELECT_UPSTREAM}" if upstream else ""
    )


def failure(asset: AssetKey, errors: dict, count: int, allow_retries: bool) -> Failure:
    """A step's failed partitions as a Failure: one line naming them and their codes, the table, and
    ``reason_codes`` (partition -> code), which `evidence demo` reports per tenant-month."""
    first: EvidenceError = next(iter(errors.values()))
    return Failure(
        description=describe(asset, errors, count),
        metadata={
            "reason_code": first.code,
            "failed_partitions": failure_table(errors),
            "reason_codes": MetadataValue.json({str(key): error.code for key, error in errors.items()}),
        },
        allow_retries=allow_retries,
    )


def not_materialized(context, errors: dict, later: Iterable[AssetKey], keys: Iterable) -> Iterator[AssetObservation]:
    """One observation per partition this run will not materialize because of ``errors``: the step's own failed
    partitions, and the ``keys`` of the run's ``later`` assets (every partition of the range when the step fails,
    since Dagster skips their steps; the failed ones when it goes on)."""
    stopped = f"run {context.run.run_id[:8]} stopped at {context.asset_key.to_user_string()}"
    because = f"{stopped}: {summary(errors)}"
    table = failure_table(errors)
    # The reason is in the metadata as well as the description: the partition page shows an event's metadata.
    for key, error in errors.items():
        yield AssetObservation(
            asset_key=context.asset_key,
            partition=str(key),
            description=f"not materialized: {error}",
            metadata={"not_materialized": str(error), "reason_code": error.code, "failed_partitions": table},
        )
    keys = list(keys)
    for asset in later:
        for key in keys:
            # A failed tenant-month's own code and message on one line; one skipped with its range, the range's.
            own = errors.get(key)
            line = f"{stopped}: {tenant_month_of(key).tenant} {tenant_month_of(key).period} {own}" if own else because
            code = own.code if own else ReasonCode.UPSTREAM_NOT_MATERIALIZED.value
            yield AssetObservation(
                asset_key=asset,
                partition=str(key),
                description=f"not materialized: {line}",
                metadata={"not_materialized": line, "reason_code": code, "failed_partitions": table},
            )


def run_assets(context) -> Set[AssetKey]:
    """The assets this run materializes."""
    return context.run.asset_selection or context.job_def.asset_layer.asset_graph.executable_asset_keys


def later_assets(context) -> list[AssetKey]:
    """The assets of this run after the current step's asset (Dagster skips them when the step fails)."""
    graph = context.job_def.asset_layer.asset_graph
    selected = run_assets(context)
    found, frontier = [], [context.asset_key]
    while frontier:
        for child in sorted(graph.get(frontier.pop()).child_keys):
            if child in selected and child not in found:
                found.append(child)
                frontier.append(child)
    return found
