"""The code server forks runs from a fork server that has imported the code location (defs/extensions/run_fork.py).

That a real code server does so, and that the runs it forks succeed, is checked where the launch paths run through
one (test_launch_paths.py); here, that the patch applies only to the Dagster it was checked against, and what the
fork server imports.
"""

import tomllib

from dagster._grpc.server import DagsterApiServer

from evidence_pipeline.defs.extensions import run_fork
from evidence_pipeline_tests.support.dagster_services import REPO
from evidence_pipeline_tests.support.guarded_patch import assert_patched_only_on_the_checked_dagster


def test_the_patch_applies_only_to_the_checked_dagster(monkeypatch):
    assert_patched_only_on_the_checked_dagster(
        monkeypatch, run_fork.install, DagsterApiServer, "StartRun", run_fork._dagster_start_run
    )


def test_the_fork_server_preloads_the_module_the_code_server_loads():
    """A module name the fork server cannot import is skipped silently: each run would import the location again."""
    for deployment in ("deploy/Dockerfile", "deploy/compose.yaml"):  # how the image and compose start the code server
        assert f'"--module-name", "{run_fork.CODE_LOCATION_MODULE}"' in (REPO / deployment).read_text(), deployment
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["tool"]["dagster"]["module_name"] == run_fork.CODE_LOCATION_MODULE
