"""The triggers that make the database refuse to change the ledger's history (created by the migrations).

UPDATE and DELETE are refused row by row; on PostgreSQL TRUNCATE too (SQLite has none). Trigger names derive from
the table's name, so a migration that renames a table drops its triggers and creates them again under the new one.
"""

from __future__ import annotations

_GUARDS = (("update", "UPDATE", "ROW"), ("delete", "DELETE", "ROW"), ("truncate", "TRUNCATE", "STATEMENT"))
_SQLITE_GUARD = """
CREATE TRIGGER {table}_no_{action} BEFORE {verb} ON {table}
BEGIN SELECT RAISE(ABORT, 'LEDGER_APPEND_ONLY: {table} rows cannot be changed'); END
"""
# evidence_ledger_append_only() is created once, by revision 0001.
_POSTGRES_GUARD = """
CREATE TRIGGER {table}_no_{action} BEFORE {verb} ON {table}
FOR EACH {level} EXECUTE FUNCTION evidence_ledger_append_only()
"""


def _guards(dialect: str) -> tuple[tuple[str, str, str], ...]:
    return _GUARDS if dialect == "postgresql" else _GUARDS[:2]


def create_guards(dialect: str, table: str) -> list[str]:
    """The statements that put the append-only triggers on ``table``."""
    template = _POSTGRES_GUARD if dialect == "postgresql" else _SQLITE_GUARD
    return [
        template.format(table=table, action=action, verb=verb, level=level) for action, verb, level in _guards(dialect)
    ]


def drop_guards(dialect: str, table: str) -> list[str]:
    """The statements that remove them (a rename, or an attacker with DDL rights in the tests)."""
    on_table = f" ON {table}" if dialect == "postgresql" else ""
    return [f"DROP TRIGGER {table}_no_{action}{on_table}" for action, _, _ in _guards(dialect)]
