from __future__ import annotations

import os
from functools import lru_cache

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
        return _runtime(Settings.from_env(environ), os.environ.get("EVIDENCE_GENERATE_DEV_KEYS", "1") != "0")


@lru_cache(maxsize=8)
def _runtime(settings: Settings, generate_dev_keys: bool) -> Runtime:
    # One Runtime per process and settings: the ledger's connection pool and the loaded keys are reused.
    return Runtime.from_settings(settings, generate_dev_keys=generate_dev_keys)
