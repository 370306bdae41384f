"""The docs site's pages for tests: hand-written pages as files, generated pages from docs/gen_reference.py, the
script mkdocs-gen-files runs at build time (imported here under another name, so it writes nothing)."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


@functools.cache
def generator():
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generated_page(name: str) -> str:
    """A generated page's Markdown, as the site build writes it."""
    return generator().PAGES[name]()


def page(name: str) -> str:
    """A hand-written page's Markdown."""
    return (DOCS / name).read_text()
