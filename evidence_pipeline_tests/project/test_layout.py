"""The tests' layout (docs/architecture/index.md, "The tests"): the tests of ``evidence_pipeline/<name>`` (a package or
a top-level module) are in ``evidence_pipeline_tests/<name>/``, what spans the repository in ``project/``, what tests
share in ``support/``; a test module imports the product and ``support``, never another test module nor conftest.py."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
PACKAGE = TESTS.parent / "evidence_pipeline"
# The folders that mirror no package: what spans the repository, and what the tests share.
PROJECT, SUPPORT = TESTS / "project", TESTS / "support"


def _mirrors_the_product(folder: Path) -> bool:
    """``folder`` (relative to the tests' root) names a package or a top-level module of evidence_pipeline."""
    mirrored = PACKAGE / folder
    return mirrored.is_dir() or mirrored.with_suffix(".py").is_file()


def _misplaced(root: Path) -> list[str]:
    """Test files and folders under ``root`` (laid out as TESTS is) that are not where the layout puts them."""

    def placed(folder: Path) -> bool:
        relative = folder.relative_to(root)
        return relative.parts[:1] in {("project",), ("support",)} or _mirrors_the_product(relative)

    files = [
        str(path.relative_to(root))
        for path in root.rglob("test_*.py")
        if path.parent == root or not placed(path.parent) or path.parent.relative_to(root).parts[0] == "support"
    ]
    folders = [
        f"{folder.relative_to(root)}/"
        for folder in root.rglob("*")
        if folder.is_dir() and folder.name != "__pycache__" and not placed(folder)
    ]
    return sorted(files + folders)


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(TESTS.parent).with_suffix("").parts)


def _test_imports(path: Path) -> list[str]:
    """The modules of evidence_pipeline_tests a file imports (relative imports resolved), other than support's."""
    package = _module_name(path).rsplit(".", 1)[0]
    imported = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    [*package.split(".")[: len(package.split(".")) - node.level + 1], *filter(None, [base])]
                )
            imported += [base] + [f"{base}.{alias.name}" for alias in node.names]
    return sorted(
        {
            name
            for name in imported
            if name.startswith("evidence_pipeline_tests.")
            and not name.startswith("evidence_pipeline_tests.support")
            and (name.count(".") > 1 or not (TESTS / name.split(".")[1]).is_dir())  # a folder alone is no module
        }
    )


def test_every_test_file_is_in_the_folder_of_the_package_it_tests():
    assert _misplaced(TESTS) == []
    assert _mirrors_the_product(Path("ledger")) and _mirrors_the_product(Path("config"))  # a package, a module


def test_the_layout_check_finds_a_flat_test_and_a_folder_that_mirrors_nothing(tmp_path):
    for path in (
        "test_flat.py",
        "ledger/test_jobs.py",
        "project/test_docs.py",
        "support/corpus/x.pdf",
        "support/test_x.py",
    ):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).touch()
    (tmp_path / "nothing").mkdir()
    (tmp_path / "nothing" / "test_x.py").touch()
    assert _misplaced(tmp_path) == ["nothing/", "nothing/test_x.py", "support/test_x.py", "test_flat.py"]


def test_no_test_imports_another_test_module_or_conftest():
    importers = {str(path.relative_to(TESTS)): names for path in TESTS.rglob("*.py") if (names := _test_imports(path))}
    assert importers == {}


def test_the_import_check_finds_an_import_of_a_test_module_or_of_conftest(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.TESTS", tmp_path / "evidence_pipeline_tests")
    module = tmp_path / "evidence_pipeline_tests" / "ledger" / "test_x.py"
    module.parent.mkdir(parents=True)
    module.write_text(
        "from evidence_pipeline_tests.conftest import SMALL\n"
        "from evidence_pipeline_tests.ledger import test_jobs\n"
        "from . import test_leases\n"
        "from ..support.signers import Signers\n"
        "from evidence_pipeline_tests.support import signers\n"
        "import evidence_pipeline_tests.documents.test_redaction\n"
    )
    assert _test_imports(module) == [
        "evidence_pipeline_tests.conftest",
        "evidence_pipeline_tests.conftest.SMALL",
        "evidence_pipeline_tests.documents.test_redaction",
        "evidence_pipeline_tests.ledger.test_jobs",
        "evidence_pipeline_tests.ledger.test_leases",
    ]
