"""The audit ledger and the state that commits with its events, one module per responsibility, each a piece that takes
the core ``Ledger`` (ledger.py: the engine and its transactions, append-only hash-chained events and publications)
and shares it: jobs + leases (jobs.py, over job_states.py: the states, the retry budget and the one rule of a live
lease), the webhook deliveries announced in an event's transaction (announcements.py; outbox.py is the deliverer's
side), tenants (tenants.py: the registry), tokens (tokens.py: API tokens, offboarding records), actors (actors.py:
registered identities, their keys, roles and used nonces), documents (documents.py: admitted documents and the events
that name them), document jobs (submissions.py: accepting them behind quotas and backpressure; document_jobs.py:
reading and working them under a lease), batches + pages (batches.py: manifests dispatched into child jobs; pages.py:
pages of jobs for the Dagster runs), mirrors (mirrors.py: rows checked against their events) and migrations
(migrations/: the one definition of the schema), with merkle.py's proofs, chain.py's link (pure, as the offline
auditors need it), append_only.py's triggers, db.py's classified errors and admission.py's clock, limits and lock.
The database layer (SQLAlchemy, Alembic) loads on first use of ``Ledger``: what needs only the pure modules
(``merkle``, as `evidence verify --package` does) never loads it. Source publications: source_events.py (one
`source.published` event per revision, in the publication's transaction or the action gate's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evidence_pipeline.ledger.chain import GENESIS_HASH
    from evidence_pipeline.ledger.ledger import Ledger
    from evidence_pipeline.models import LedgerEvent

__all__ = ["GENESIS_HASH", "Ledger", "LedgerEvent"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from evidence_pipeline.ledger import ledger

        return getattr(ledger, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
