import pytest

from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError


@pytest.mark.parametrize("env", [
    {"EVIDENCE_LEASE_SECONDS": "nan"}, {"EVIDENCE_LEASE_SECONDS": "inf"}, {"EVIDENCE_LEASE_SECONDS": "-1"},
    {"EVIDENCE_MAX_ATTEMPTS": "0.5"}, {"EVIDENCE_MAX_ATTEMPTS": "0"}, {"EVIDENCE_PADES_LEVEL": "B-LTA"},
    {"EVIDENCE_PADES_LEVEL": "B-T"}, {"EVIDENCE_PADES_LEVEL": "B-X", "EVIDENCE_TSA_URL": "http://127.0.0.1/tsa"},
    {"EVIDENCE_PADES_LEVEL": "B-LT", "EVIDENCE_TSA_URL": "ftp://tsa"}, {"EVIDENCE_S3_OBJECT_LOCK_MODE": "FOREVER"},
    {"EVIDENCE_S3_OBJECT_LOCK_MODE": "COMPLIANCE", "EVIDENCE_S3_OBJECT_LOCK_DAYS": "0"},
])
def test_bad_settings_are_config_invalid(env):
    with pytest.raises(EvidenceError) as error:
        Settings.from_env(env)
    assert error.value.code == "CONFIG_INVALID"
