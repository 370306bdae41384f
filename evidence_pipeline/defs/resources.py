from __future__ import annotations

import os

from dagster import ConfigurableResource

from evidence_pipeline.config import Settings
from evidence_pipeline.pipeline import Runtime


class EvidenceResource(ConfigurableResource):
    """Hands assets the domain Runtime. Settings come from the environment; `home` overrides EVIDENCE_HOME."""

    home: str | None = None

    def runtime(self) -> Runtime:
        environ = dict(os.environ)
        if self.home:
            environ["EVIDENCE_HOME"] = self.home
        return runtime_for(Settings.from_env(environ))


_runtimes: dict[Settings, Runtime] = {}  # one per process and settings: connections and loaded keys are reused
_MAX_RUNTIMES = 8


def runtime_for(settings: Settings) -> Runtime:
    if settings not in _runtimes:
        if len(_runtimes) >= _MAX_RUNTIMES:
            _runtimes.pop(next(iter(_runtimes))).ledger.engine.dispose()
        _runtimes[settings] = Runtime.from_settings(
            settings,
            generate_dev_keys=os.environ.get("EVIDENCE_GENERATE_DEV_KEYS", "1") != "0",
            s3_client=s3_client(settings) if settings.uses_s3 else None,
        )
    return _runtimes[settings]


_inherited: list[Runtime] = []


def _forget_runtimes_in_forked_child() -> None:
    """A forked worker (parallel.map_stage) builds its own Runtime and must neither use nor close its parent's
    connections: closing an inherited SQLite connection can checkpoint or remove the parent's WAL. So the
    inherited ones are kept referenced, untouched, for the child's lifetime."""
    _inherited.extend(_runtimes.values())
    _runtimes.clear()


os.register_at_fork(after_in_child=_forget_runtimes_in_forked_child)


def s3_client(settings: Settings):
    """A boto3 S3 client through dagster-aws; credentials come from the standard AWS environment/chain."""
    from dagster_aws.s3 import S3Resource  # ~1 s of imports that a run on the local archive does not need

    return S3Resource(endpoint_url=settings.s3_endpoint_url, region_name=settings.s3_region).get_client()
