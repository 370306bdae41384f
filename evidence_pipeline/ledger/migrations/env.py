"""Alembic environment for the ledger. Runs on the connection Ledger hands it; never reads alembic.ini."""

from alembic import context

from evidence_pipeline.ledger.ledger import VERSION_TABLE

connection = context.config.attributes["connection"]
context.configure(connection=connection, version_table=VERSION_TABLE, transactional_ddl=True)
with context.begin_transaction():
    context.run_migrations()
