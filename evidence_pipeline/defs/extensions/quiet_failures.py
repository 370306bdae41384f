"""A version-guarded wrapper: a foreseeable step failure is recorded without Dagster's stack trace.

Our assets and checks fail a step with ``dagster.Failure`` carrying a ``reason_code`` for every foreseen condition
(defs/failures.py): its one-line description names the tenant-months and their codes. Dagster 1.13.27 still attaches
the stack of the raise (Dagster's frames and the installation's paths) to the step failure, and repeats it in
RUN_FAILURE, burying the description. Dagster has no option for it, hence this wrapper of the event builder that
execute_plan calls for a failed step: for such a Failure, the error is its description alone; every other error
(an unexpected one, a Failure without a reason code) keeps Dagster's full traceback.

It applies only to the exact version and source it was checked against; otherwise it warns and leaves Dagster
alone (the stack traces stay). test_assets.py fails until it is re-checked.
"""

from dagster import Failure
from dagster._core.execution.plan import execute_plan, objects
from dagster._utils.error import SerializableErrorInfo

from evidence_pipeline.defs.extensions.guard import patch

# sha256 of inspect.getsource(objects.step_failure_event_from_exc_info) in dagster==1.13.27.
CHECKED_SOURCE_SHA256 = "25df05880deb98668b9f9066553695a8d3e0e86d7184f64356e921ca6e2b2991"

_dagster_step_failure_event = execute_plan.step_failure_event_from_exc_info


def _step_failure_event(step_context, exc_info, user_failure_data=None, error_source=None):
    failure = exc_info[1]
    if isinstance(failure, Failure) and "reason_code" in (failure.metadata or {}):
        from dagster._core.events import DagsterEvent

        error = SerializableErrorInfo(message=f"{failure.description}\n", stack=[], cls_name=type(failure).__name__)
        return DagsterEvent.step_failure_event(
            step_context=step_context,
            step_failure_data=objects.StepFailureData(
                error=error, user_failure_data=user_failure_data, error_source=error_source
            ),
        )
    return _dagster_step_failure_event(step_context, exc_info, user_failure_data, error_source)


def install() -> bool:
    """Wrap the step failure event builder if Dagster is the checked version; True when installed."""
    return patch(
        execute_plan,
        "step_failure_event_from_exc_info",
        _step_failure_event,
        what=__name__,
        consequence="foreseeable step failures keep Dagster's stack traces",
        sources={objects.step_failure_event_from_exc_info: CHECKED_SOURCE_SHA256},
    )
