"""The production backends for one test: a database of its own on the session's PostgreSQL and a bucket of its own on
its S3 server (conftest.py starts both)."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from evidence_pipeline.config import Settings


def new_database(postgres_url: str, template: str | None = None) -> str:
    """A database of its own for one test: empty, or a copy of ``template``."""
    name = "t_" + uuid.uuid4().hex[:16]
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")))
    admin.dispose()
    return sa.make_url(postgres_url).set(database=name).render_as_string(hide_password=False)


def drop_database(postgres_url: str, url: str) -> None:
    """Drop a test's database, ending any session a test left open on it."""
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{sa.make_url(url).database}" WITH (FORCE)'))
    admin.dispose()


def aws_environment(request, tmp_path, migrated: bool = False) -> dict[str, str]:
    """Settings for the production backends: a fresh database (``migrated``: already holding the ledger's and
    Dagster's schemas) and a fresh Object Lock bucket."""
    from evidence_pipeline.runtime import s3_client

    endpoint = request.getfixturevalue("s3_endpoint")
    bucket = "evidence-" + uuid.uuid4().hex[:12]
    postgres_url = request.getfixturevalue("postgres_url")
    database = new_database(postgres_url, request.getfixturevalue("migrated_template") if migrated else None)
    request.addfinalizer(lambda: drop_database(postgres_url, database))
    env = {
        "EVIDENCE_HOME": str(tmp_path / "home"),
        "EVIDENCE_LEDGER_URL": database,
        "EVIDENCE_ARCHIVE_URI": f"s3://{bucket}/archive",
        "EVIDENCE_SOURCES_URI": f"s3://{bucket}/sources",
        "EVIDENCE_STAGING_URI": f"s3://{bucket}/staging",
        "EVIDENCE_S3_ENDPOINT_URL": endpoint,
        "EVIDENCE_S3_REGION": "us-east-1",
        "EVIDENCE_S3_OBJECT_LOCK_MODE": "COMPLIANCE",
        "EVIDENCE_S3_OBJECT_LOCK_DAYS": "1",
        "EVIDENCE_S3_SSE": "AES256",
    }
    s3_client(Settings.from_env(env)).create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    return env
