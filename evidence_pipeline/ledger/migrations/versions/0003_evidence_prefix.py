"""Every table of the ledger is named evidence_*: Dagster's schedule storage has a table `jobs` too, and Dagster
and the ledger may share one database. Renames the tables with their indexes, constraints and sequences (their
names share PostgreSQL's namespace with Dagster's: `jobs_pkey` would collide), and puts the append-only triggers
back under the new names.

Revision ID: 0003
"""

from typing import cast

import sqlalchemy as sa
from alembic import op

from evidence_pipeline.ledger import append_only

revision = "0003"
down_revision = "0002"

# old name -> new name, the referenced table before the one that references it
RENAMES = {"audit_events": "evidence_audit_events", "publications": "evidence_publications", "jobs": "evidence_jobs"}
APPEND_ONLY = ("audit_events", "publications")


def upgrade() -> None:
    bind = op.get_bind()
    dialect = bind.dialect.name
    for old, new in RENAMES.items():
        if sa.inspect(bind).has_table(new):
            continue  # 0002 created evidence_jobs under its final name: the `jobs` here is Dagster's
        if old in APPEND_ONLY:
            for statement in append_only.drop_guards(dialect, old):
                op.execute(statement)
        op.rename_table(old, new)
        if dialect == "postgresql":
            _rename_postgres_relations(bind, old, new)
        else:
            _rename_sqlite_indexes(bind, old, new)
        if old in APPEND_ONLY:
            for statement in append_only.create_guards(dialect, new):
                op.execute(statement)


def _renamed(name: str, old: str, new: str) -> str | None:
    """`audit_events_pkey` -> `evidence_audit_events_pkey`, `ix_jobs_state` -> `ix_evidence_jobs_state`."""
    for prefix in ("", "ix_"):
        if name.startswith(prefix + old + "_"):
            return prefix + new + name[len(prefix + old) :]
    return None


def _rename_postgres_relations(bind: sa.Connection, old: str, new: str) -> None:
    """Indexes (renaming a constraint's index renames the constraint), owned sequences, and foreign keys."""
    relations = bind.execute(
        sa.text(
            "SELECT c.relname, c.relkind FROM pg_class c WHERE c.oid IN ("
            " SELECT indexrelid FROM pg_index WHERE indrelid = CAST(:table AS regclass)"
            " UNION SELECT objid FROM pg_depend WHERE refobjid = CAST(:table AS regclass) AND deptype = 'a'"
            "  AND classid = 'pg_class'::regclass)"
        ),
        {"table": new},
    ).all()
    for name, kind in relations:
        if (renamed := _renamed(name, old, new)) is not None:
            op.execute(f'ALTER {"SEQUENCE" if kind == "S" else "INDEX"} "{name}" RENAME TO "{renamed}"')
    for foreign_key in sa.inspect(bind).get_foreign_keys(new):
        if (renamed := _renamed(cast(str, foreign_key["name"]), old, new)) is not None:  # PostgreSQL names each
            op.execute(f'ALTER TABLE {new} RENAME CONSTRAINT "{foreign_key["name"]}" TO "{renamed}"')


def _rename_sqlite_indexes(bind: sa.Connection, old: str, new: str) -> None:
    """SQLite cannot rename an index: create it again under the new name (its automatic indexes follow the table)."""
    for index in sa.inspect(bind).get_indexes(new):
        # SQLite lists named indexes only, and the ledger's were on plain columns (no expression's None)
        name, columns = cast(str, index["name"]), cast(list[str], index["column_names"])
        if (renamed := _renamed(name, old, new)) is not None:
            op.drop_index(name, table_name=new)
            op.create_index(renamed, new, columns, unique=bool(index["unique"]))


def downgrade() -> None:
    raise NotImplementedError("the audit ledger is never downgraded")
