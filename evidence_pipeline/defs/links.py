"""Links in metadata, as the UI shows them: Dagster 1.13 renders a url value as an ``<a href>`` (MetadataEntry.tsx,
``target="_blank"``), so a root-relative link (``/runs/…``) opens in the UI it is clicked in, whatever its address:
the read-only UI stays read-only, and no address recorded at materialization goes stale. Archive keys, which are not
links, are path values."""

from __future__ import annotations

from urllib.parse import quote

from dagster import AssetKey, MetadataValue


def ui_link(path: str) -> MetadataValue:
    """``path`` of the UI (``/runs/…``), root-relative."""
    return MetadataValue.url(path)


def partition_links(partition: str, assets: tuple[AssetKey, ...]) -> dict[str, MetadataValue]:
    """Links to the same partition of upstream ``assets`` (the auditor's way back)."""
    return {
        f"{key.to_user_string()} partition": ui_link(
            f"/assets/{key.to_user_string()}?view=partitions&partition={quote(str(partition))}"
        )
        for key in assets
    }


def archive_key(key: str) -> MetadataValue:
    """A key inside a store (``bundles/<tenant>/…``): a path value, not text that reads like a broken link."""
    return MetadataValue.path(key)
