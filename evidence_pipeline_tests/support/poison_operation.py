"""A document operation for tests whose processor misbehaves on demand, the way hostile input makes a real one:
it raises what no code classifies, fails an I/O, exhausts memory, hangs, aborts the process, or reports where it ran."""

from __future__ import annotations

import os
import time

from sqlalchemy import create_engine, text

from evidence_pipeline.documents.registry import Operation, ProcessorResult, register

PLANTED = "4111-1111-1111-1111"  # what the raised exception quotes: it must reach no message
LEDGER_URL: str | None = None  # set by a test before its job runs: the worker process inherits it


def _processor(inputs, options, pinned) -> ProcessorResult:
    trigger = options["trigger"]
    if trigger == "raise":
        raise KeyError(PLANTED)
    if trigger == "oserror":
        raise OSError(PLANTED)
    if trigger == "memory":
        bytearray(1024**3)  # 1 GiB, far past the test's limit
    if trigger == "hang":
        time.sleep(3600)
    if trigger == "abort":
        os.abort()
    return ProcessorResult({}, {"pid": os.getpid(), "ledger_lockable": LEDGER_URL and _ledger_lockable()})


def _ledger_lockable() -> bool:
    """Can another connection take the ledger's writer lock right now (nobody holds a transaction on it)?"""
    engine = create_engine(LEDGER_URL)
    try:
        with engine.connect() as conn:
            if conn.dialect.name == "sqlite":
                conn.exec_driver_sql("PRAGMA busy_timeout = 0")
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                conn.execute(text("SET lock_timeout = '200ms'"))
                conn.execute(text("LOCK TABLE evidence_jobs, evidence_audit_events IN EXCLUSIVE MODE"))
            conn.rollback()
        return True
    except Exception:
        return False
    finally:
        engine.dispose()


POISON = register(
    Operation(
        name="test-poison",
        processor=_processor,
        options={"trigger": ("probe", "raise", "oserror", "memory", "hang", "abort")},
    )
)
