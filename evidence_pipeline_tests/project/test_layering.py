"""The layering: the domain is plain Python (only defs/ and definitions.py import dagster, and only defs/extensions/
reaches into Dagster's internals), production code never imports synthetic data, the
packages import one way, and so do the ledger's pieces over its shared core."""

import ast
import graphlib
from pathlib import Path

from evidence_pipeline_tests.support.docs_pages import generator

PACKAGE = Path(__file__).resolve().parents[2] / "evidence_pipeline"
EXTENSIONS = PACKAGE / "defs" / "extensions"
DAGSTER_ALLOWED = {PACKAGE / "definitions.py", PACKAGE / "defs"}


def _imported(path: Path) -> set[str]:
    """Every module a file imports, anywhere in it, by its dotted name (``from a import b``: ``a`` and ``a.b``)."""
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return modules


def _imports(path: Path) -> set[str]:
    """The top-level packages a file imports."""
    return {name.split(".")[0] for name in _imported(path)}


def test_no_dagster_import_outside_defs():
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if not any(path == allowed or allowed in path.parents for allowed in DAGSTER_ALLOWED)
        and {"dagster", "dagster_aws", "dagster_postgres"} & _imports(path)
    ]
    assert offenders == []
    assert "dagster" in _imports(PACKAGE / "defs" / "assets.py")  # the scan itself sees imports


def test_only_the_extensions_reach_into_dagsters_internals():
    """``dagster._…`` (and ``dagster_shared``, its internals' serdes) is Dagster's private code: the guarded patches
    and extensions hold every use of it, each module with its reason, so defs/ reads as plain definitions."""
    offenders = sorted(
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in PACKAGE.rglob("*.py")
        if EXTENSIONS not in path.parents
        for name in _imported(path)
        if name.startswith(("dagster._", "dagster_shared"))
    )
    assert offenders == []
    assert any(name.startswith("dagster._") for name in _imported(EXTENSIONS / "storage.py"))  # the scan sees them


def test_the_definitions_never_import_the_code_location():
    """definitions.py assembles defs/; a module of defs/ that needs the assembled jobs is handed them."""
    importers = [
        str(path.relative_to(PACKAGE))
        for path in (PACKAGE / "defs").rglob("*.py")
        if "evidence_pipeline.definitions" in _imported(path)
    ]
    assert importers == []
    assert "evidence_pipeline.defs.assets" in _imported(PACKAGE / "definitions.py")  # the scan sees imports


# The demo's Dagster job (which `evidence demo` runs) is the only production path to synthetic data.
SYNTHETIC_ALLOWED = {PACKAGE / "synthetic", PACKAGE / "defs" / "demo.py"}


def test_production_code_never_imports_synthetic_data():
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if not any(path == allowed or allowed in path.parents for allowed in SYNTHETIC_ALLOWED)
        and any(name.startswith("evidence_pipeline.synthetic") for name in _imported(path))
    ]
    assert offenders == []
    demo = _imported(PACKAGE / "defs" / "demo.py")
    assert any(name.startswith("evidence_pipeline.synthetic") for name in demo)  # the scan itself sees imports


def test_the_packages_import_one_way():
    """No cycle between the packages and top-level modules, counting a function's own (lazy) import too: each is a
    layer over those it imports (the graph the architecture page draws)."""
    graph = generator().package_imports()
    order = list(graphlib.TopologicalSorter(graph).static_order())  # CycleError names the cycle
    assert order.index("store") < order.index("monthly") < order.index("documents") < order.index("intake")
    assert order.index("defs") > order.index("documents") and "intake" not in graph["defs"]
    assert order.index("ledger") < order.index("actors")  # the ledger stores actors' events, never checks them


def test_the_extensions_import_nothing_of_the_definitions():
    """defs/extensions/ (Dagster's extensions and guarded patches) sits under the definitions: they use it, never
    the other way."""
    for path in EXTENSIONS.rglob("*.py"):
        upward = {
            name
            for name in _imported(path)
            if name.startswith("evidence_pipeline.defs.") and not name.startswith("evidence_pipeline.defs.extensions")
        }
        assert not upward, f"{path.relative_to(PACKAGE)} imports {sorted(upward)}"


# What an auditor re-checks offline, from events alone, needs no database: these modules of actors/ import only
# each other, the vocabulary and the DSSE encoding (never the ledger, SQLAlchemy or the configuration).
OFFLINE_ACTORS = {"requests", "roles", "registry", "verify", "offline"}
OFFLINE_ALLOWED = {f"evidence_pipeline.actors.{name}" for name in OFFLINE_ACTORS} | {
    "evidence_pipeline",
    "evidence_pipeline.errors",
    "evidence_pipeline.models",
    "evidence_pipeline.jsonread",
    "evidence_pipeline.canonical",
    "evidence_pipeline.signing.dsse",
}


def test_the_offline_actor_checks_need_no_database():
    for name in OFFLINE_ACTORS:
        imported = _imported(PACKAGE / "actors" / f"{name}.py")
        ours = {module for module in imported if module.split(".")[0] == "evidence_pipeline"}
        # ``from evidence_pipeline.x import y`` names both x and x.y: a name is allowed when it or its module is
        assert all(module in OFFLINE_ALLOWED or module.rsplit(".", 1)[0] in OFFLINE_ALLOWED for module in ours), name
        assert not {"sqlalchemy", "alembic"} & _imports(PACKAGE / "actors" / f"{name}.py"), name
    assert "evidence_pipeline.ledger.actors" in _imported(PACKAGE / "actors" / "authorize.py")  # the scan sees it


def _units_imported_at_module_level(path: Path) -> set[str]:
    """The packages and top-level modules of evidence_pipeline that a module imports when it is imported (not those
    a function imports when it runs)."""
    units = set()
    for node in ast.parse(path.read_text()).body:
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "evidence_pipeline":
            parts = node.module.split(".")
            names = [alias.name for alias in node.names] if len(parts) == 1 else [parts[1]]
        elif isinstance(node, ast.Import):
            names = [alias.name.split(".")[1] for alias in node.names if alias.name.startswith("evidence_pipeline.")]
        units |= {name for name in names if (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").exists()}
    return units


CLI = PACKAGE / "cli"
# What a command module may import when it is imported: the ground, and cli's own shared modules. Everything else a
# command needs it imports in its body, so that `evidence --help` loads no ledger, pipeline, pyHanko or Dagster.
CLI_LOADS_AT_IMPORT = {"cli", "config", "errors", "models", "paths"}


def test_cli_is_on_top_and_imports_its_commands_lazily():
    importers = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if CLI not in path.parents
        and any(name.split(".")[:2] == ["evidence_pipeline", "cli"] for name in _imported(path))
    ]
    assert importers == []
    eager = {
        str(path.relative_to(PACKAGE)): sorted(_units_imported_at_module_level(path) - CLI_LOADS_AT_IMPORT)
        for path in CLI.glob("*.py")
    }
    assert {module: units for module, units in eager.items() if units} == {}
    assert {"config", "paths"} <= _units_imported_at_module_level(CLI / "resources.py")  # the scan sees cli's imports


LEDGER = PACKAGE / "ledger"
# The core every piece of the ledger takes: the engine, its transactions and the chain (ledger.py), job states and
# leases (jobs.py, job_states.py), the deliveries announced in their transactions (announcements.py), and what they
# are built on, and the typed rows they return (rows.py).
CORE_GROUND = {"db", "mirrors", "merkle", "chain", "append_only", "rows"}
LEDGER_CORE = {"ledger", "jobs", "job_states", "announcements"} | CORE_GROUND


def _ledger_modules_imported(path: Path) -> set[str]:
    """The modules of ledger/ that a module of it imports, anywhere in it: an import inside a function is a
    dependency all the same (it only hides a cycle from a scan of the module's top)."""
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("evidence_pipeline.ledger"):
            parts = node.module.split(".")
            modules |= {parts[2]} if len(parts) > 2 else {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            modules |= {
                alias.name.split(".")[2] for alias in node.names if alias.name.startswith("evidence_pipeline.ledger.")
            }
    return {name for name in modules if (LEDGER / f"{name}.py").exists()}


def _function_level_imports(path: Path) -> list[str]:
    """The imports made inside a function of a module, as ``function: module``."""
    found = []
    for function in ast.walk(ast.parse(path.read_text())):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            found += [
                f"{function.name}: {getattr(node, 'module', None) or node.names[0].name}"
                for node in ast.walk(function)
                if isinstance(node, ast.Import | ast.ImportFrom)
            ]
    return found


def test_the_ledger_imports_at_the_top_of_its_modules():
    """Every dependency of a ledger module is visible where a reader (and the cycle check below) looks first. The
    package's own lazy ``Ledger`` attribute (PEP 562, so that ``ledger.merkle`` loads no SQLAlchemy) is the one
    exception: it is the package's door, not a module's dependency."""
    found = {path.name: _function_level_imports(path) for path in LEDGER.glob("*.py") if path.stem != "__init__"}
    assert {name: imports for name, imports in found.items() if imports} == {}
    assert _function_level_imports(CLI / "webhook.py")  # the scan itself sees imports in functions


def test_the_ledger_pieces_share_its_core_one_way_and_none_inherits():
    """Each piece of the ledger (tokens, documents, submissions, document jobs, batches, pages, tenants) is a class
    of its own over the shared core: the core imports no piece, the pieces import one another one way, and none
    inherits (a mixin would re-assemble them into one class again)."""
    modules = [path for path in LEDGER.glob("*.py") if path.stem != "__init__"]
    graph = {path.stem: _ledger_modules_imported(path) - {path.stem} for path in modules}
    list(graphlib.TopologicalSorter(graph).static_order())  # CycleError names the cycle
    assert {core: graph[core] - LEDGER_CORE for core in LEDGER_CORE} == {core: set() for core in LEDGER_CORE}
    assert "ledger" in graph["tokens"] and "submissions" in graph["batches"]  # the scan itself sees imports
    inheriting = [
        f"{path.stem}.{node.name}"
        for path in modules
        if path.stem not in LEDGER_CORE
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.bases
    ]
    assert inheriting == []


LONG_MODULE = 400


def test_a_long_module_says_why_in_its_docstring():
    """A module over ~400 lines is a smell unless its docstring says why the length belongs together."""
    unexplained = []
    for path in PACKAGE.rglob("*.py"):
        if "migrations" in path.parts or len(path.read_text().splitlines()) <= LONG_MODULE:
            continue
        if "Over 400 lines because" not in (ast.get_docstring(ast.parse(path.read_text())) or ""):
            unexplained.append(str(path.relative_to(PACKAGE)))
    assert unexplained == []


# Private names that other modules still import, both in issue 46's modules (open branches edit them: they make them
# public or move them). The list only shrinks: a new private import across modules fails the test.
STILL_IMPORTED_PRIVATE = {
    "documents/redaction_check.py: evidence_pipeline.documents.gate._every_object",
    "documents/gate.py: evidence_pipeline.documents.pdftext._to_unicode",
}


def test_no_new_private_name_is_imported_across_modules():
    imported = {
        f"{path.relative_to(PACKAGE)}: {node.module}.{alias.name}"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("evidence_pipeline")
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    }
    assert imported - STILL_IMPORTED_PRIVATE == set()
    assert STILL_IMPORTED_PRIVATE - imported == set(), "no longer imported: remove it from the list"


RUNTIME = PACKAGE / "runtime.py"
BENCH = PACKAGE.parent / "bench"
TESTS = PACKAGE.parent / "evidence_pipeline_tests"


def _ledger_pieces() -> set[str]:
    """The classes of ledger/ built over the core: their ``__init__`` takes the ``Ledger``."""
    return {
        node.name
        for path in LEDGER.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
        for init in node.body
        if isinstance(init, ast.FunctionDef)
        and init.name == "__init__"
        and any(isinstance(arg.annotation, ast.Name) and arg.annotation.id == "Ledger" for arg in init.args.args)
    }


def _constructed(path: Path, classes: set[str]) -> set[str]:
    """The classes of ``classes`` that a module calls (``Tokens(…)``, ``tokens.Tokens(…)``)."""
    return {
        name
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        for name in [getattr(node.func, "id", None) or getattr(node.func, "attr", None)]
        if name in classes
    }


def test_only_the_runtime_builds_the_ledgers_pieces():
    """One door into the ledger: the runtime builds each piece once (``rt.tokens``, ``rt.batches``, …) over its one
    core, and production code, the benches and the tests ask it for them (a test over a bare ledger through
    support/pieces.py's runtime over it); none builds its own."""
    pieces = _ledger_pieces()
    assert {"Tokens", "TenantRegistry", "ActorLedger", "Batches", "Pages", "DocumentJobs", "Outbox"} <= pieces
    offenders = sorted(
        f"{path.relative_to(PACKAGE.parent)}: {name}"
        for path in [*PACKAGE.rglob("*.py"), *BENCH.rglob("*.py"), *TESTS.rglob("*.py")]
        if path != RUNTIME
        for name in _constructed(path, pieces)
    )
    assert offenders == []
    assert _constructed(RUNTIME, pieces) == pieces  # the runtime builds every one, and the scan sees calls


MAX_POSITIONAL = 5


def _functions(tree: ast.AST, prefix: str = ""):
    """Every function under ``tree`` with its qualified name (``Class.method``, ``outer.inner``)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{prefix}{node.name}", node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield from _functions(node, f"{prefix}{node.name}.")
        elif not isinstance(node, ast.Lambda):
            yield from _functions(node, prefix)


def _a_click_command(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    # click calls a command's callback with its parameters by keyword, whatever the signature
    return any(
        isinstance(decorator, ast.Call) and getattr(decorator.func, "attr", None) == "command"
        for decorator in function.decorator_list
    )


def test_a_call_with_more_than_a_few_arguments_names_them():
    """Past the first few (the subject a function acts on), parameters are keyword-only: a call reads
    ``verify_ledger(ledger, archive, witness=…, origin=…, policy=…)``, and swapping two of them cannot type-check."""
    positional = {
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in PACKAGE.rglob("*.py")
        for name, function in _functions(ast.parse(path.read_text()))
        if len(function.args.posonlyargs + function.args.args) > MAX_POSITIONAL and not _a_click_command(function)
    }
    assert positional == set(), "make the parameters past the first few keyword-only (`*,`)"
