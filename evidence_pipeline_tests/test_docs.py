"""The docs site says what the code does. `mkdocs build --strict` (make test) checks links, anchors and the nav;
these check what the build cannot: that each setting's documented variable is the one Settings.from_env reads,
and that the generated reference pages leave nothing of the code out (a lazy command group, a new endpoint)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import click
import pytest

from evidence_pipeline import config
from evidence_pipeline.config import Settings
from evidence_pipeline.models import EventType
from evidence_pipeline_tests.docs_pages import generated_page, generator

# a valid value for every field whose type alone does not give one
SAMPLES = {
    "pades_level": "B-T", "tsa_url": "http://tsa.example/", "s3_object_lock_mode": "GOVERNANCE",
    "s3_object_lock_days": "7", "generate_dev_keys": "0", "first_period": "2024-06", "ledger_url": "sqlite:///x",
    "webhook_allowed_networks": "10.1.0.0/16", "ui_url": "https://dagster.example",
    "witnesses": "https://witness.example witness.example/w1+e42b2f2c+BDtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop",
}
NEEDS = {"pades_level": {"EVIDENCE_TSA_URL": "http://tsa.example/"}, "s3_object_lock_mode": {
    "EVIDENCE_S3_OBJECT_LOCK_DAYS": "7"}}


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

    for page, contract in (("tenants-api/endpoints.md", generator().contract()),
                           ("operators/operator-api-endpoints.md", generator().operator_contract())):
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
            assert (f"`{name.removesuffix('__init__.py')}`" in modules), name
    assert "(no docstring)" not in modules


def test_the_readme_tree_names_every_package():
    """The front page's tree at a glance names each package of the product (a newcomer's map of it)."""
    root = Path(__file__).resolve().parent.parent
    tree = (root / "README.md").read_text().split("## The tree at a glance", 1)[1]
    packages = {path.parent.name for path in (root / "evidence_pipeline").glob("*/__init__.py")}
    assert sorted(name for name in packages if f"{name}/" not in tree) == []
