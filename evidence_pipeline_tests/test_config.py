import os

import pytest

from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError


@pytest.mark.parametrize("env", [
    {"EVIDENCE_LEASE_SECONDS": "nan"}, {"EVIDENCE_LEASE_SECONDS": "inf"}, {"EVIDENCE_LEASE_SECONDS": "-1"},
    {"EVIDENCE_MAX_ATTEMPTS": "0.5"}, {"EVIDENCE_MAX_ATTEMPTS": "0"}, {"EVIDENCE_PADES_LEVEL": "B-LTA"},
    {"EVIDENCE_PADES_LEVEL": "B-T"}, {"EVIDENCE_PADES_LEVEL": "B-X", "EVIDENCE_TSA_URL": "http://127.0.0.1/tsa"},
    {"EVIDENCE_PADES_LEVEL": "B-LT", "EVIDENCE_TSA_URL": "ftp://tsa"}, {"EVIDENCE_S3_OBJECT_LOCK_MODE": "FOREVER"},
    {"EVIDENCE_S3_OBJECT_LOCK_MODE": "COMPLIANCE", "EVIDENCE_S3_OBJECT_LOCK_DAYS": "0"}, {"EVIDENCE_WORKERS": "0"},
    {"EVIDENCE_WORKERS": "two"},
])
def test_bad_settings_are_config_invalid(env):
    with pytest.raises(EvidenceError) as error:
        Settings.from_env(env)
    assert error.value.code == "CONFIG_INVALID"


def test_worker_processes_default_to_a_share_of_the_cpus(monkeypatch):
    """EVIDENCE_WORKERS wins; unset, a process that shares its host with others like it takes its share, rounded
    up: 3 runs on 6 CPUs fork 2 workers each, 4 runs 2 each (rounded down, 1 each: 2 of the 6 CPUs had no worker),
    7 runs 1 each."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(6)))
    assert Settings.from_env({"EVIDENCE_WORKERS": "3"}).worker_processes(sharing=4) == 3
    default = Settings.from_env({})
    assert default.workers is None and default.worker_processes() == 6
    assert [default.worker_processes(sharing=runs) for runs in (2, 3, 4, 7)] == [3, 2, 2, 1]
