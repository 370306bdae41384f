"""The docs site says what the code does. `mkdocs build --strict` (make test) checks links, anchors and the nav;
these check what the build cannot: that each setting's documented variable is the one Settings.from_env reads,
that the generated reference pages leave nothing of the code out (a lazy command group, a new endpoint), and that
every relative link, also read as Markdown in the tree, leads somewhere (the README lists the generated pages)."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from evidence_pipeline import config
from evidence_pipeline.config import Settings
from evidence_pipeline.models import EventType
from evidence_pipeline_tests.support.docs_pages import generated_page, generator

# a valid value for every field whose type alone does not give one
SAMPLES = {
    "pades_level": "B-T",
    "tsa_url": "http://tsa.example/",
    "s3_object_lock_mode": "GOVERNANCE",
    "s3_object_lock_days": "7",
    "generate_dev_keys": "0",
    "first_period": "2024-06",
    "ledger_url": "sqlite:///x",
    "webhook_allowed_networks": "10.1.0.0/16",
    "witnesses": "https://witness.example witness.example/w1+e42b2f2c+BDtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop",
}
NEEDS = {
    "pades_level": {"EVIDENCE_TSA_URL": "http://tsa.example/"},
    "s3_object_lock_mode": {"EVIDENCE_S3_OBJECT_LOCK_DAYS": "7"},
}


def _sample(field: dataclasses.Field) -> str:
    if field.name in SAMPLES:
        return SAMPLES[field.name]
    kind = str(field.type)
    if "Path" in kind:
        return "/srv/evidence-sample"
    if kind.startswith(("int", "float")):
        return "7"
    return "s3://sample-bucket/prefix" if field.name.endswith("_uri") else "sample-value"


@pytest.mark.parametrize("field", dataclasses.fields(Settings), ids=lambda field: field.name)
def test_each_documented_variable_sets_its_setting(field, tmp_path):
    default = getattr(Settings.from_env({"EVIDENCE_HOME": str(tmp_path)}), field.name)
    for variable in field.metadata["env"]:
        env = {"EVIDENCE_HOME": str(tmp_path), variable: _sample(field), **NEEDS.get(field.name, {})}
        assert getattr(Settings.from_env(env), field.name) != default, variable


def test_every_variable_config_reads_is_documented():
    read = set(re.findall(r'"((?:EVIDENCE|DAGSTER|AWS)_[A-Z0-9_]+)"', Path(config.__file__).read_text()))
    documented = {name for field in dataclasses.fields(Settings) for name in field.metadata["env"]}
    assert read == documented
    assert all(field.metadata["doc"] for field in dataclasses.fields(Settings))


def test_the_reference_pages_leave_nothing_out():
    settings = generated_page("reference/settings.md")
    assert all(f"`{name}`" in settings for field in dataclasses.fields(Settings) for name in field.metadata["env"])
    events = generated_page("reference/events.md")
    assert all(f"| `{event.value}` | {event.meaning} |" in events for event in EventType)

    from evidence_pipeline.cli import main

    cli = generated_page("reference/cli.md")
    paths = [ctx.command_path for _, ctx in generator()._commands(main, click.Context(main, info_name="evidence"))]
    assert len(paths) > 30 and all(f"\n## `{path}`\n" in cli for path in paths)

    for page, contract in (
        ("tenants-api/endpoints.md", generator().contract()),
        ("operators/operator-api-endpoints.md", generator().operator_contract()),
    ):
        endpoints = generated_page(page)
        for path, methods in contract["paths"].items():
            for method, operation in methods.items():
                assert f"## `{method.upper()} {path}`" in endpoints
                for status, response in operation["responses"].items():
                    error = response.get("content", {}).get("application/json", {}).get("schema", {})
                    codes = error.get("properties", {}).get("error", {}).get("properties", {}).get("code", {})
                    assert all(f"`{code}`" in endpoints for code in codes.get("enum", [])), (path, status)

    modules = generated_page("architecture/modules.md")
    package = Path(config.__file__).parent
    for source in package.rglob("*.py"):
        if "versions" not in source.parts:
            name = source.relative_to(package.parent).as_posix()
            assert f"`{name.removesuffix('__init__.py')}`" in modules, name
    assert "(no docstring)" not in modules


def test_the_readme_tree_names_every_package():
    """The front page's tree at a glance names each package of the product (a newcomer's map of it)."""
    root = Path(__file__).resolve().parents[2]
    tree = (root / "README.md").read_text().split("## The tree at a glance", 1)[1]
    packages = {path.parent.name for path in (root / "evidence_pipeline").glob("*/__init__.py")}
    assert sorted(name for name in packages if f"{name}/" not in tree) == []


ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"!?\[[^\]]*\]\(<?([^)\s>]+)")  # an inline Markdown link or image: its target
CODE = re.compile(r"^```.*?^```|`[^`\n]*`", re.S | re.M)  # fenced blocks and code spans: not links
GENERATED_SECTION = "### Pages generated when the site is built"


def _generated() -> set[str]:
    """What docs/gen_reference.py writes at build time, by path under docs/."""
    return set(generator().PAGES) | set(generator().FILES)


def _relative_links() -> list[tuple[str, Path, str]]:
    """(page, target file, anchor) for each relative link in the README and in every page under docs/, hand-written
    or generated; a page's links are relative to where it is (a generated page: where the build writes it)."""
    docs = ROOT / "docs"
    pages = {ROOT / "README.md": (ROOT / "README.md").read_text()}
    pages |= {path: path.read_text() for path in docs.rglob("*.md")}
    pages |= {docs / name: generated_page(name) for name in generator().PAGES}
    links = []
    for page, text in pages.items():
        for target in LINK.findall(CODE.sub("", text)):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith(("/", "#")):
                continue  # an address, an absolute path (mkdocs --strict refuses those in docs/), or this page
            path, _, anchor = target.partition("#")
            links.append((page.relative_to(ROOT).as_posix(), (page.parent / path).resolve(), anchor))
    return links


def _named(target: Path) -> str:
    return target.relative_to(ROOT).as_posix() if target.is_relative_to(ROOT) else str(target)


def test_every_relative_link_names_a_file_in_the_tree_or_a_generated_page_the_readme_lists():
    """Reading the Markdown the README points to, each link leads to a file, or to a page the README says exists only
    in the built site (and where to read it)."""
    generated = _generated()
    docs = ROOT / "docs"
    links = _relative_links()
    assert len(links) > 100  # the pattern finds the docs' links
    dead = sorted(
        {
            (page, _named(target))
            for page, target, _ in links
            if not target.exists()
            and not (target.is_relative_to(docs) and target.relative_to(docs).as_posix() in generated)
        }
    )
    assert dead == []
    listed = (ROOT / "README.md").read_text().partition(GENERATED_SECTION)[2].partition("\n## ")[0]
    assert set(re.findall(r"^    docs/(\S+)", listed, re.M)) == generated  # each, and no page no longer generated


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, as `make test` builds it (offline, --strict)."""
    out = tmp_path_factory.mktemp("site")
    env = os.environ | {"DISABLE_MKDOCS_2_WARNING": "true", "NO_MKDOCS_2_WARNING": "1"}
    build = subprocess.run(
        [Path(sys.executable).parent / "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    return out


def _built(site: Path, target: Path) -> Path:
    """Where the site has a file of docs/: a page at its directory URL (use_directory_urls), others as they are."""
    name = target.relative_to(ROOT / "docs")
    if name.suffix != ".md":
        return site / name
    return site / name.parent / ("index.html" if name.stem in ("index", "README") else f"{name.stem}/index.html")


def test_every_relative_link_into_the_docs_resolves_in_the_built_site(site):
    """The same links, as the site serves them: the page (or file) is built, and the anchor is on it."""
    docs = ROOT / "docs"
    broken = []
    for page, target, anchor in _relative_links():
        if not target.is_relative_to(docs):
            continue  # README's links to the tree (bench/, deploy/): the test above
        built = _built(site, target)
        if not built.is_file() or (anchor and f'id="{anchor}"' not in built.read_text()):
            broken.append((page, _named(target), anchor))
    assert broken == []


ACTOR_KEY = re.compile(r"(?:--key |load_actor_key\(Path\(\")([^\s\")`]+\.pem)")


def test_every_actor_key_a_sample_names_exists_after_make_demo_or_is_made_on_its_page():
    """A sample's `--key` is the demo's operator (`make demo` creates .evidence/actors/dev-*.pem), a placeholder in
    capitals, or a key a `keygen` on the same page creates (before: samples named olga.pem, which nothing made)."""
    from evidence_pipeline.synthetic.demo_actors import DEV_ROLES

    demo_keys = {f".evidence/actors/{name}.pem" for name in DEV_ROLES}
    unmade = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text()
        made = set(re.findall(r"keygen (\S+\.pem)", text))
        for key in ACTOR_KEY.findall(text):
            name = key.rsplit("/", 1)[-1]
            if key not in demo_keys and not name[:-4].isupper() and not any(m.endswith(name) for m in made):
                unmade.append(f"{page.relative_to(ROOT)}: {key}")
    assert not unmade, unmade
