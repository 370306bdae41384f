"""What every test of a version-guarded patch of Dagster checks (defs/extensions/guard.py)."""

from collections.abc import Callable

import dagster
import pytest


def assert_patched_only_on_the_checked_dagster(
    monkeypatch, install: Callable[[], bool], owner: object, name: str, dagster_original: object
) -> None:
    """On another Dagster version ``install`` warns and leaves ``owner.name`` as Dagster's; on the checked one it
    patches (which fails after a Dagster upgrade until the patch's source digests are re-checked)."""
    monkeypatch.setattr(owner, name, dagster_original)
    monkeypatch.setattr(dagster, "__version__", "1.13.28")
    with pytest.warns(UserWarning, match="checked against dagster==1.13.27"):
        assert not install()
    assert getattr(owner, name) is dagster_original
    monkeypatch.setattr(dagster, "__version__", "1.13.27")
    assert install()
    assert getattr(owner, name) is not dagster_original
