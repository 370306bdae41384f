"""The domain is plain Python: only defs/ and definitions.py may import dagster."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "evidence_pipeline"
DAGSTER_ALLOWED = {PACKAGE / "definitions.py", PACKAGE / "defs"}


def _imports(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module.split(".")[0])
    return modules


def test_no_dagster_import_outside_defs():
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if not any(path == allowed or allowed in path.parents for allowed in DAGSTER_ALLOWED)
        and {"dagster", "dagster_aws", "dagster_postgres"} & _imports(path)
    ]
    assert offenders == []
    assert "dagster" in _imports(PACKAGE / "defs" / "assets.py")  # the scan itself sees imports


# The demo's Dagster job (which `evidence demo` runs) is the only production path to synthetic data.
SYNTHETIC_ALLOWED = {PACKAGE / "synthetic", PACKAGE / "defs" / "demo.py"}


def _project_imports(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return modules


def test_production_code_never_imports_synthetic_data():
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if not any(path == allowed or allowed in path.parents for allowed in SYNTHETIC_ALLOWED)
        and any(name.startswith("evidence_pipeline.synthetic") for name in _project_imports(path))
    ]
    assert offenders == []
    demo = _project_imports(PACKAGE / "defs" / "demo.py")
    assert any(name.startswith("evidence_pipeline.synthetic") for name in demo)  # the scan itself sees imports
