import ast
import dataclasses
import os
from pathlib import Path

import pytest

from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError


@pytest.mark.parametrize(
    "env",
    [
        {"EVIDENCE_LEASE_SECONDS": "nan"},
        {"EVIDENCE_LEASE_SECONDS": "inf"},
        {"EVIDENCE_LEASE_SECONDS": "-1"},
        {"EVIDENCE_MAX_ATTEMPTS": "0.5"},
        {"EVIDENCE_MAX_ATTEMPTS": "0"},
        {"EVIDENCE_PADES_LEVEL": "B-LTA"},
        {"EVIDENCE_PADES_LEVEL": "B-T"},
        {"EVIDENCE_PADES_LEVEL": "B-X", "EVIDENCE_TSA_URL": "http://127.0.0.1/tsa"},
        {"EVIDENCE_PADES_LEVEL": "B-LT", "EVIDENCE_TSA_URL": "ftp://tsa"},
        {"EVIDENCE_S3_OBJECT_LOCK_MODE": "FOREVER"},
        {"EVIDENCE_S3_OBJECT_LOCK_MODE": "COMPLIANCE", "EVIDENCE_S3_OBJECT_LOCK_DAYS": "0"},
        {"EVIDENCE_WORKERS": "0"},
        {"EVIDENCE_WORKERS": "two"},
    ],
)
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


# Environment variables of ours read outside Settings, each for a reason. Any other read of an EVIDENCE_ or DAGSTER_
# variable, or of a declared setting, outside its declaration fails below.
UNDECLARED = {
    ("evidence_pipeline/faults.py", "EVIDENCE_KILL_POINT"): "fault injection for tests, never an operator's setting; "
    "read at the fault point itself, in whichever child process a test started with it",
    ("evidence_pipeline/faults.py", "EVIDENCE_IO_FAULT"): "the same",
    ("evidence_pipeline/faults.py", "EVIDENCE_IO_FAULT_WHILE"): "the same",
}


def _environment_reads(path: Path) -> list[str]:
    """The variable names ``path`` reads from the process environment by a literal (or a module constant):
    ``os.environ.get(…)``, ``os.environ[…]``, ``… in os.environ``, ``os.getenv(…)``. Writes (a child's environment,
    ``setdefault`` of a library's own variable) are not reads of a setting."""
    tree = ast.parse(path.read_text())
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }

    def environ(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "environ"
            or isinstance(node, ast.Name)
            and node.id == "environ"
        )

    def getenv(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "getenv"
            or isinstance(node, ast.Name)
            and node.id == "getenv"
        )

    def name(key: ast.AST) -> str | None:
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return key.value
        return constants.get(key.id) if isinstance(key, ast.Name) else None

    keys = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and node.args
            and (
                getenv(node.func)
                or isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and environ(node.func.value)
            )
        ):
            keys.append(node.args[0])
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and environ(node.value):
            keys.append(node.slice)
        elif (
            isinstance(node, ast.Compare)
            and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
            and any(environ(right) for right in node.comparators)
        ):
            keys.append(node.left)
    return [found for found in map(name, keys) if found]


def test_every_setting_is_read_through_its_declaration():
    """A setting read from the environment by hand skips its declaration: its default, its check, its reason code
    and its line in the reference page. Only config.py's reader reads settings, and it names none by hand."""
    root = Path(__file__).resolve().parents[2]
    declared = {name for field in dataclasses.fields(Settings) for name in field.metadata["env"]}
    reads = {
        (str(path.relative_to(root)), variable)
        for folder in ("evidence_pipeline", "bench")
        for path in (root / folder).rglob("*.py")
        for variable in _environment_reads(path)
    }
    ours = {
        (path, variable)
        for path, variable in reads
        if variable in declared or variable.startswith(("EVIDENCE_", "DAGSTER_"))
    }
    assert ours == set(UNDECLARED), "read outside config.Settings: " + repr(sorted(ours - set(UNDECLARED)))
    assert not declared & {variable for _, variable in UNDECLARED}


def test_the_scan_sees_each_kind_of_read(tmp_path):
    source = tmp_path / "reads.py"
    source.write_text(
        'import os\nNAME = "EVIDENCE_C"\nos.environ.get("EVIDENCE_A")\nos.environ["EVIDENCE_B"]\n'
        'NAME in os.environ\nos.getenv("DAGSTER_D")\nos.environ["EVIDENCE_E"] = "1"\n'
        'os.environ.setdefault("DAGSTER_F", "1")\n'
    )
    assert sorted(_environment_reads(source)) == ["DAGSTER_D", "EVIDENCE_A", "EVIDENCE_B", "EVIDENCE_C"]
