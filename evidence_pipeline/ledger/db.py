"""Database plumbing shared by the ledger's modules: classified driver errors and the lost-race signal."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TypeVar

from sqlalchemy.exc import DatabaseError, IntegrityError, InterfaceError, OperationalError

from evidence_pipeline.errors import EvidenceError, ReasonCode

READ_ONLY_TRANSACTION = "25006"  # PostgreSQL's SQLSTATE read_only_sql_transaction
Found = TypeVar("Found")
Done = TypeVar("Done")  # what a transaction's work returns


class LostRace(Exception):
    """A compare-and-swap found the row changed since it was read."""


def present(row: Found | None, code: ReasonCode, what: str) -> Found:
    """A row that a query just listed, or that this transaction just wrote: there, or ``code`` saying ``what`` is
    missing (erased under the reader's feet) rather than a None further on."""
    if row is None:
        raise EvidenceError(code, what)
    return row


@contextlib.contextmanager
def classified_errors() -> Iterator[None]:
    """Database outages are a classified, retryable failure, never a driver traceback."""
    try:
        yield
    except (OperationalError, InterfaceError) as error:
        raise EvidenceError(
            ReasonCode.LEDGER_UNAVAILABLE, f"ledger database unavailable ({type(error.orig).__name__})"
        ) from None
    except IntegrityError:
        raise  # a concurrent writer won a race: the caller retries
    except DatabaseError as error:  # e.g. a file that is not a database at all
        if getattr(error.orig, "pgcode", None) == READ_ONLY_TRANSACTION:  # a standby, or a database set read-only
            raise EvidenceError(ReasonCode.LEDGER_UNAVAILABLE, "the ledger database is read-only") from None
        raise EvidenceError(
            ReasonCode.LEDGER_INVALID, f"the ledger database is corrupt ({type(error.orig).__name__})"
        ) from None
