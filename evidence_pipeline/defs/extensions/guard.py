"""Our few reaches into Dagster's internals apply only to the Dagster they were checked against.

Each one names the Dagster objects it relies on with the sha256 of their source as checked. On another version or
source it warns and the caller leaves Dagster alone (correct, only slower or coarser); a test per reach fails
until it is re-checked.
"""

import hashlib
import inspect
import warnings

import dagster

CHECKED_VERSION = "1.13.27"


def source_sha256(obj: object) -> str:
    return hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()


def still_checked(what: str, consequence: str, sources: dict[object, str] | None = None) -> bool:
    """True when Dagster is CHECKED_VERSION and every object in ``sources`` has its checked source digest."""
    if dagster.__version__ == CHECKED_VERSION and all(source_sha256(o) == d for o, d in (sources or {}).items()):
        return True
    warnings.warn(
        f"{what} was checked against dagster=={CHECKED_VERSION}, found {dagster.__version__} (or changed "
        f"source): {consequence}",
        stacklevel=3,
    )
    return False


def patch(
    owner: object, name: str, replacement: object, *, what: str, consequence: str, sources: dict[object, str]
) -> bool:
    """Set ``owner.name`` to ``replacement`` if Dagster is still as checked (``sources``, see still_checked);
    True when it is in place, at once when it already was."""
    if getattr(owner, name) is replacement:
        return True
    if not still_checked(what, consequence, sources):
        return False
    setattr(owner, name, replacement)
    return True
