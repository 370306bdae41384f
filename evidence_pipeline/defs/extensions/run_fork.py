"""A version-guarded patch: the code server starts each run from a fork server that has imported this code location,
not from a fresh interpreter.

In Dagster 1.13.27 the code server (``DagsterApiServer.StartRun``, what the default run launcher calls) starts every
run process with multiprocessing's "spawn": each run imports Dagster and this code location again, about 2.4 s of
CPU (bench/README.md, throughput.py), 12 times in a 1,200-partition backfill. Here it uses the "forkserver" context
instead. Its server is a fresh interpreter of its own, started with the first run, so none of the code server's
gRPC threads are forked. It imports the code location once and forks one process per run. The run gets the same
arguments as before (the reconstructable job and the serialized run, pickled to it) and runs the same code.

The fork server lives as long as the code server process that started it: a reloaded code location is served by a
new process, with a fork server of its own. What the code location fixes at import is fixed when the fork server
starts, as it is in the code server itself (partitions.py: the rolling window of open months). The code server
imports this package while it loads the code location, before it registers its gRPC handlers, so the handler
registered is this one. The patch applies only to the exact version and source it was checked against; otherwise
it warns and leaves Dagster alone (correct, each run spawned). test_run_fork.py fails until it is re-checked.
"""

import multiprocessing

from dagster._grpc.server import DagsterApiServer

from evidence_pipeline.defs.extensions.guard import patch

CODE_LOCATION_MODULE = "evidence_pipeline.definitions"
# sha256 of inspect.getsource(DagsterApiServer.StartRun) in dagster==1.13.27: it starts the run's process, its
# queue and its termination event from the server's multiprocessing context, read at each call.
CHECKED_SOURCE_SHA256 = "ec53adf5e40c9c7c941dd936c04131705d9c1abfd5bcc34fd6c104ff1c0ebfd5"

_dagster_start_run = DagsterApiServer.StartRun
FORK_SERVER = multiprocessing.get_context("forkserver")


def start_run(self: DagsterApiServer, request, context):
    """Dagster's StartRun, its run process forked from the fork server rather than spawned."""
    self._mp_ctx = FORK_SERVER
    return _dagster_start_run(self, request, context)


def install() -> bool:
    """Patch StartRun if Dagster is the checked version; True when patched."""
    if not patch(
        DagsterApiServer,
        "StartRun",
        start_run,
        what=__name__,
        consequence="each run process imports Dagster and the code location again",
        sources={_dagster_start_run: CHECKED_SOURCE_SHA256},
    ):
        return False
    FORK_SERVER.set_forkserver_preload([CODE_LOCATION_MODULE])
    return True
