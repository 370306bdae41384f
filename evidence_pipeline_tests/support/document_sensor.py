"""The document dispatch sensor ticked once, as the daemon would tick it (this imports the code location)."""

from __future__ import annotations

from dagster import build_sensor_context

from evidence_pipeline.definitions import defs


def tick(instance):
    sensor = defs.get_sensor_def("document_dispatch_sensor")
    context = build_sensor_context(instance=instance, resources={"evidence": defs.resources["evidence"]})
    return sensor.evaluate_tick(context)
