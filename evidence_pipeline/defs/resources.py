"""The one Dagster resource: a thin handle on the domain Runtime."""

from __future__ import annotations

from dagster import ConfigurableResource

from evidence_pipeline.config import Settings
from evidence_pipeline.runtime import Runtime, runtime_for


class EvidenceResource(ConfigurableResource):
    """Hands assets the domain Runtime. Settings come from the environment; `home` overrides EVIDENCE_HOME."""

    home: str | None = None

    def settings(self) -> Settings:
        return Settings.from_env(overrides={"EVIDENCE_HOME": self.home} if self.home else None)

    def runtime(self) -> Runtime:
        return runtime_for(self.settings())
