"""Alembic environment for the ledger. Runs on the connection Ledger hands it; never reads alembic.ini."""

from alembic import context

# Dagster keeps its own alembic_version table in the same database: ours must not collide with it.
VERSION_TABLE = "evidence_ledger_version"

connection = context.config.attributes["connection"]
context.configure(connection=connection, version_table=VERSION_TABLE, transactional_ddl=True)
with context.begin_transaction():
    context.run_migrations()
