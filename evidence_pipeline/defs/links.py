"""Links in metadata, as the UI shows them: Dagster prints a url value as its text, so a path relative to the
webserver read as a bare path and opened only inside the UI. Links are absolute under EVIDENCE_UI_URL (the address
`evidence ui` serves, by default); archive keys, which are not links, are path values."""

from __future__ import annotations

from urllib.parse import quote

from dagster import AssetKey, MetadataValue


def ui_link(base: str, path: str) -> MetadataValue:
    """``path`` of the UI (``/runs/…``) as an absolute link under ``base`` (Settings.ui_url)."""
    return MetadataValue.url(base.rstrip("/") + path)


def partition_links(base: str, partition: str, assets: tuple[AssetKey, ...]) -> dict[str, MetadataValue]:
    """Links to the same partition of upstream ``assets`` (the auditor's way back)."""
    return {
        f"{key.to_user_string()} partition": ui_link(
            base, f"/assets/{key.to_user_string()}?view=partitions&partition={quote(str(partition))}")
        for key in assets
    }


def archive_key(key: str) -> MetadataValue:
    """A key inside a store (``bundles/<tenant>/…``): a path value, not text that reads like a broken link."""
    return MetadataValue.path(key)
