"""The ledger's pieces over a test's own ledger, built by the runtime as production builds them: one door into the
ledger (test_layering.py), so no test constructs a piece (``Tokens(ledger)``, ``Outbox(ledger)``, …) itself."""

from __future__ import annotations

import tempfile
from pathlib import Path

from evidence_pipeline.config import Settings
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.store.uri import open_store

_NO_HOME = Path(tempfile.gettempdir()) / "evidence-ledger-pieces-no-home"


def pieces_of(ledger: Ledger) -> Runtime:
    """A Runtime over ``ledger`` (a test's bare ledger, opened without Settings) for its pieces: ``.tokens``,
    ``.tenants``, ``.outbox``, ``.batches``, … A test of the ledger alone has no stores: the runtime's are under a
    home that nothing creates (a piece never reaches a store). Not cached: a cache keyed by the ledger would keep
    every test's ledger, and its connections, alive."""
    url = ledger.engine.url.render_as_string(hide_password=False)
    settings = Settings.from_env({"EVIDENCE_HOME": str(_NO_HOME), "EVIDENCE_LEDGER_URL": url})
    return Runtime(
        settings=settings,
        sources=open_store(settings.sources_uri, scheme="sources", private=True),
        staging=open_store(settings.staging_uri, scheme="staging", private=True),
        previews=open_store(settings.preview_uri, scheme="previews", private=True),
        archive=open_store(settings.archive_uri),
        ledger=ledger,
    )
