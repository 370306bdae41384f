from __future__ import annotations

import os
from functools import lru_cache

from dagster import ConfigurableResource
from dagster_aws.s3 import S3Resource

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


@lru_cache(maxsize=8)
def runtime_for(settings: Settings) -> Runtime:
    # One Runtime per process and settings: the ledger's connections and the loaded keys are reused.
    return Runtime.from_settings(
        settings,
        generate_dev_keys=os.environ.get("EVIDENCE_GENERATE_DEV_KEYS", "1") != "0",
        s3_client=s3_client(settings) if settings.uses_s3 else None,
    )


def s3_client(settings: Settings):
    """A boto3 S3 client through dagster-aws; credentials come from the standard AWS environment/chain."""
    return S3Resource(endpoint_url=settings.s3_endpoint_url, region_name=settings.s3_region).get_client()
