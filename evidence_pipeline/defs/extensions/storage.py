"""Dagster storage classes that keep their database connections, named by dagster.yaml / dagster.production.yaml.

A range run stores several events per partition (planned, materialization, check evaluation, each mirrored into
the index), and Dagster's stock storages open a connection for every one of them:

- ``SqliteEventLogStorage._connect`` creates an engine with ``NullPool`` per operation and disposes it. Closing
  the last connection of a WAL database checkpoints the WAL into the database and syncs it, so every event pays
  for a checkpoint as well as an open.
- dagster-postgres builds its engines with ``NullPool``: a new PostgreSQL connection (socket, auth, backend fork)
  per storage call.

The classes below change how connections are obtained; schema and queries are Dagster's. One more change on
SQLite: a batch of asset events (a range run's planned events, a step's materializations) commits in one
transaction per shard instead of two per event. They rely on private Dagster methods, so they apply only to the
Dagster they were checked against; otherwise they warn and behave exactly as Dagster's own classes (see guard.py;
test_range_runs.py re-checks).
"""

import functools
import itertools
import math
import os
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import psycopg2.errors
import sqlalchemy as sa
from dagster import DagsterEventType, EventLogEntry
from dagster._config import Field, StringSource
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.event_log.schema import ConcurrencyLimitsTable, SqlEventLogStorageTable
from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage
from dagster_postgres.utils import create_pg_engine, get_token_provider_from_config, pg_url_from_config

from evidence_pipeline.defs.extensions.guard import still_checked

# Run shards whose engine stays open: the index shard and the runs this process is writing or reading.
OPEN_SHARDS = 8
# Asset events that SqliteEventLogStorage.store_event stores in the run's shard and the index and nothing else.
_STORED_TOGETHER = frozenset(
    {
        DagsterEventType.ASSET_MATERIALIZATION,
        DagsterEventType.ASSET_OBSERVATION,
        DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
    }
)
# The Dagster methods whose internals (attributes, locks, transactions) the classes below rely on, as checked.
CHECKED_SOURCES = {
    SqliteEventLogStorage._connect: "b8435f2665689760a1e1d98e17b78ceef5a48256dc11b562a20c840abc37d170",
    SqliteEventLogStorage.__init__: "264c15baa761a7bb4fd59f529de849ffd483fa20494c0898448891460b47ea60",
    PostgresEventLogStorage.__init__: "647dff00b58c122294a362d38fed84b5064aa0f4520a64e6febb167120f2b5b2",
    PostgresRunStorage.__init__: "c20e1fcd1ee52b39579bdab98f9fefa3a94acda1abf015bce303d82c78c3072a",
    SqlEventLogStorage.initialize_concurrency_limit_to_default: "6d44fe17c895aa2967a08ba788d0ba6b35d7c2488e31dbab20dbcfcb2d2c0d7d",  # noqa: E501 (a pinned digest)
    # What store_event_batch stores together, and how the asset key table's columns are probed.
    SqliteEventLogStorage.store_event: "f89aed40602438b9bbbc885d4dca38ef3fcf6f067db70fca22dd40eca8a6e03c",
    SqlEventLogStorage._store_asset_event: "fdb9340b9eef1c9bdbf159bcc9aaa334a029167764bc74d9cfd57c0a7d7a36af",
    SqlEventLogStorage._get_asset_entry_values: "bb3b9df2c6c371fea1c6537e35a65d8836d4e16c5094c79df357c11d57bae1c3",
    SqlEventLogStorage._has_asset_key_col_on_connection: "981049dfa81d2e475f18e9135151c284f87bea9d4e48067125081619c5e232c4",  # noqa: E501 (a pinned digest)
}


@functools.cache
def checked() -> bool:
    return still_checked(__name__, "using Dagster's stock storage behaviour", CHECKED_SOURCES)


_inherited_pools: list = []


def _dispose_in_forked_child(engine: sa.Engine) -> None:
    """A forked child (a worker of evidence_pipeline.parallel) must not use, or close, the parent's pooled
    connections. SQLAlchemy's recipe is ``dispose(close=False)`` after the fork; the old pool stays referenced,
    because garbage-collecting it would close inherited SQLite connections (which can checkpoint or remove the
    parent's WAL)."""
    ref = weakref.ref(engine)

    def detach() -> None:
        if (inherited := ref()) is not None:
            _inherited_pools.append(inherited.pool)
            inherited.dispose(close=False)

    os.register_at_fork(after_in_child=detach)


def _wal_normal_sync(dbapi_connection, _record) -> None:
    """Dagster puts its SQLite databases in WAL mode but keeps synchronous=FULL: an fsync per commit, and a range
    run commits ~15 times per partition. In WAL mode NORMAL is the usual choice: a process crash loses nothing and
    the database never corrupts; only an OS crash or power loss can roll back the last commits. This is the
    embedded default for development and demos; production stores runs and events in PostgreSQL."""
    dbapi_connection.execute("PRAGMA synchronous=NORMAL")


class _RememberedTables:
    """Dagster probes for migrated tables several times per event (on SQLite on a new engine each time, on
    PostgreSQL a catalog query each time: ~5 per partition of a range run), and on SQLite it reflects the asset key
    table's columns for every asset event it stores. Tables and columns are never dropped while the instance is in
    use, so one once seen is remembered."""

    def _remembered(self, kind: str, name: str, probe: Callable[[], bool]) -> bool:
        if not checked():
            return probe()
        seen = self.__dict__.setdefault(kind, set())
        if name not in seen:
            if not probe():
                return False
            seen.add(name)
        return True

    def has_table(self, table_name: str) -> bool:
        return self._remembered("_tables_seen", table_name, functools.partial(super().has_table, table_name))

    def _has_asset_key_col_on_connection(self, conn: sa.Connection, column_name: str) -> bool:
        return self._remembered(
            "_asset_key_columns_seen",
            column_name,
            functools.partial(super()._has_asset_key_col_on_connection, conn, column_name),
        )


class PooledSqliteEventLogStorage(_RememberedTables, SqliteEventLogStorage):
    """``SqliteEventLogStorage`` with one engine per shard kept open (LRU-bounded), same files and layout.

    ``base_dir`` is the instance directory, like ``storage: sqlite: base_dir``; events live in
    ``<base_dir>/history/runs`` exactly where Dagster's default puts them, so switching is transparent. Without
    it, the instance's own directory, known once the instance registers its storages: so the repository's
    dagster.yaml also serves `dagster dev` and `dagster definitions validate` run without DAGSTER_HOME (Dagster
    then makes a temporary instance directory under the working directory).
    """

    def __init__(self, base_dir: str | None = None, inst_data=None):
        self._engines: OrderedDict[str, sa.Engine] = OrderedDict()  # used under the parent's _db_lock only
        self._deferred_inst_data = inst_data
        if base_dir is not None:
            super().__init__(os.path.join(base_dir, "history", "runs", ""), inst_data)

    def register_instance(self, instance) -> None:
        if not hasattr(self, "_base_dir"):  # no base_dir configured: the instance's directory
            super().__init__(os.path.join(instance.root_directory, "history", "runs", ""), self._deferred_inst_data)
        super().register_instance(instance)

    @classmethod
    def config_type(cls):
        return {"base_dir": Field(StringSource, is_required=False)}

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls(inst_data=inst_data, **config_value)

    def _engine(self, shard: str) -> sa.Engine:
        engine = self._engines.pop(shard, None)
        if engine is None:
            # SQLAlchemy's default pool for a file database (QueuePool) keeps the connection between uses.
            engine = sa.create_engine(
                self.conn_string_for_shard(shard), connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS}
            )
            sa.event.listen(engine, "connect", _wal_normal_sync)
            _dispose_in_forked_child(engine)
        self._engines[shard] = engine  # most recently used last
        while len(self._engines) > OPEN_SHARDS:
            self._engines.popitem(last=False)[1].dispose()
        return engine

    @contextmanager
    def _connect(self, shard: str) -> Iterator[sa.Connection]:
        # As the parent's _connect (one lock, initdb once per shard, one transaction), minus create/dispose.
        if not checked():
            with super()._connect(shard) as conn:
                yield conn
            return
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def dispose(self) -> None:
        super().dispose()
        with self._db_lock:
            while self._engines:
                self._engines.popitem()[1].dispose()

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """What storing each event in turn stores (Dagster's ``store_event_batch``), but consecutive asset events of
        one run commit together: one transaction in the run's shard and one in the index, not two per event. Dagster
        hands over such batches when it creates a range run (a planned event per asset and partition: ~300 in the
        daemon for a run of 100) and when a run's step stores its materializations (DAGSTER_EVENT_BATCH_SIZE)."""
        if not checked():
            super().store_event_batch(events)
            return
        for (_run_id, together), group in itertools.groupby(
            events, key=lambda event: (event.run_id, event.dagster_event_type in _STORED_TOGETHER)
        ):
            if together:
                self._store_asset_events(list(group))
            else:
                for event in group:
                    self.store_event(event)

    def _store_asset_events(self, events: list[EventLogEntry]) -> None:
        # As SqliteEventLogStorage.store_event for each: the row in the run's shard, its copy in the index, the
        # asset event tags and the asset's row (each column of which the last event that sets it decides: so
        # the last event of each asset and type, in order).
        rows = [self._event_to_row(event) for event in events]
        with self.run_connection(events[0].run_id) as conn:
            conn.execute(SqlEventLogStorageTable.insert(), rows)
        with self.index_transaction() as conn:
            event_ids = [
                conn.execute(SqlEventLogStorageTable.insert().values(**row)).inserted_primary_key[0] for row in rows
            ]
            self._store_asset_event_tags(conn, events, event_ids)
            last = {(event.dagster_event.asset_key, event.dagster_event_type): i for i, event in enumerate(events)}
            for i in sorted(last.values()):
                self._store_asset_event(conn, events[i], event_ids[i])


class _PooledPostgres:
    """Replaces the NullPool engine the dagster-postgres storage built with a small pool of live connections.

    A connection that sat idle in the pool for more than ``IDLE_PING_SECONDS`` is pinged when it is checked out, and
    replaced if the server or a proxy dropped it (SQLAlchemy's pessimistic disconnect handling, but only for idle
    connections: ``pool_pre_ping`` pings on every checkout, a round trip per storage call, ~2,000 per range run of
    100). ``pool_recycle`` bounds a connection's age. AUTOCOMMIT as upstream: the storages open their own
    transactions where they need them.
    """

    POOL = {"pool_size": 2, "max_overflow": 8, "pool_recycle": 3600}
    IDLE_PING_SECONDS = 10.0

    def _use_pool(self, token_provider) -> None:
        self._engine.dispose()
        self._engine = create_pg_engine(self.postgres_url, token_provider, isolation_level="AUTOCOMMIT", **self.POOL)
        sa.event.listen(self._engine, "checkin", _note_checkin)
        sa.event.listen(self._engine, "checkout", self._ping_if_idle)
        _dispose_in_forked_child(self._engine)

    def _ping_if_idle(self, dbapi_connection, record, _proxy) -> None:
        if time.monotonic() - record.info.get("checked_in", -math.inf) <= self.IDLE_PING_SECONDS:
            return
        try:
            with dbapi_connection.cursor() as cursor:
                cursor.execute("SELECT 1")
        except psycopg2.Error as error:  # the pool discards this connection and checks out another
            raise sa.exc.DisconnectionError(f"an idle pooled connection was dropped: {error}") from error

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        token_provider = get_token_provider_from_config(config_value)
        storage = cls(
            inst_data=inst_data,
            postgres_url=pg_url_from_config(config_value),
            token_provider=token_provider,
            should_autocreate_tables=config_value.get("should_autocreate_tables", True),
        )
        if checked():
            storage._use_pool(token_provider)
        return storage


def _note_checkin(_dbapi_connection, record) -> None:
    record.info["checked_in"] = time.monotonic()


class PooledPostgresEventLogStorage(_RememberedTables, _PooledPostgres, PostgresEventLogStorage):
    def initialize_concurrency_limit_to_default(self, concurrency_key: str) -> bool:
        """Dagster inserts a pool's limit row the first time a run uses the pool and, if the row already exists,
        updates it in the same transaction. On PostgreSQL the failed INSERT aborts that transaction, so the UPDATE
        raises and the run fails: two runs that first use a pool at the same moment (or any run after the default
        limit changed) lose a run. The row then exists; bring it to the default in a fresh transaction instead."""
        try:
            return super().initialize_concurrency_limit_to_default(concurrency_key)
        except sa.exc.DBAPIError as error:
            if not checked() or not isinstance(error.orig, psycopg2.errors.InFailedSqlTransaction):
                raise
        default_limit = self._instance.global_op_concurrency_default_limit
        limits = ConcurrencyLimitsTable.c
        with self.index_transaction() as conn:
            conn.execute(
                ConcurrencyLimitsTable.update()
                .values(limit=default_limit)
                .where(
                    limits.concurrency_key == concurrency_key, limits.using_default_limit, limits.limit != default_limit
                )
            )
            self._allocate_concurrency_slots(conn, concurrency_key, default_limit)
        return True


class PooledPostgresRunStorage(_PooledPostgres, PostgresRunStorage):
    pass
