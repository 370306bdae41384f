"""The dagster.yaml that Dagster's Helm chart writes into its instance ConfigMap, from our values.

The chart renders the instance from its values with Go templates (`templates/configmap-instance.yaml` and
`templates/helpers/instance/*.tpl` in dagster-io/dagster). Neither helm nor the chart can be fetched here, so this
reproduces that mapping for the keys deploy/helm/values.yaml sets, in the chart's order, and refuses any value
that would change the instance but that it does not reproduce: a test of the rendered file then says something
about the real chart, not about a guess. The chart writes `additionalInstanceConfig` last, in the same mapping,
so a key there that the chart also writes appears twice in the text; that is kept, for Dagster's loader to judge.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

# Per section, the value keys this mapping reproduces (anything else under them raises UnsupportedValues).
SUPPORTED = {
    "scheduler": {"type"},
    "postgresql": {
        "enabled",
        "postgresqlHost",
        "postgresqlUsername",
        "postgresqlPassword",
        "postgresqlDatabase",
        "postgresqlParams",
        "postgresqlScheme",
        "service",
        "image",
    },
    "runLauncher": {"type", "config"},
    "runLauncher.config.k8sRunLauncher": {
        "loadInclusterConfig",
        "kubeconfigFile",
        "jobNamespace",
        "imagePullPolicy",
        "image",
        "envConfigMaps",
        "envSecrets",
        "envVars",
        "volumeMounts",
        "volumes",
        "labels",
        "resources",
        "failPodOnRunFailure",
        "schedulerName",
        "securityContext",
        "runK8sConfig",
    },
    "dagsterDaemon.runCoordinator": {"enabled", "type", "config"},
    "dagsterDaemon.runMonitoring": {
        "enabled",
        "startTimeoutSeconds",
        "cancelTimeoutSeconds",
        "maxResumeRunAttempts",
        "pollIntervalSeconds",
        "freeSlotsAfterRunEndSeconds",
    },
    "dagsterDaemon.runRetries": {"enabled", "maxRetries"},
    "computeLogManager": {"type"},
    "telemetry": {"enabled"},
    "retention": {"enabled"},
    "concurrency": {"enabled", "pools", "runs"},
}


class UnsupportedValues(ValueError):
    """The values ask for something this reproduction of the chart does not render."""


def render_instance_yaml(values: dict, *, release_namespace: str, fullname: str) -> str:
    """The text of the instance ConfigMap's `dagster.yaml` for ``values`` (the release's merged values for the keys
    below; the chart's defaults are not applied, so every key the templates read must be set)."""
    _check_supported(values)
    text = "".join(
        yaml.safe_dump({key: value}, sort_keys=False) for key, value in _sections(values, release_namespace, fullname)
    )
    for key, value in (values.get("additionalInstanceConfig") or {}).items():
        text += yaml.safe_dump({key: value}, sort_keys=False)
    return text


def _sections(values: dict, namespace: str, fullname: str) -> Iterator[tuple[str, Any]]:
    daemon = values["dagsterDaemon"]
    yield "scheduler", _scheduler(values["scheduler"])
    storage = _postgres(values["postgresql"])
    yield "schedule_storage", _configurable("dagster_postgres.schedule_storage", "PostgresScheduleStorage", storage)
    yield "run_launcher", _run_launcher(values, namespace, fullname)
    yield "run_storage", _configurable("dagster_postgres.run_storage", "PostgresRunStorage", storage)
    yield "event_log_storage", _configurable("dagster_postgres.event_log", "PostgresEventLogStorage", storage)
    if daemon["enabled"] and daemon["runCoordinator"]["enabled"]:
        yield "run_coordinator", _run_coordinator(daemon["runCoordinator"])
    yield "compute_logs", _compute_logs(values["computeLogManager"])
    if daemon["enabled"] and daemon["runMonitoring"]["enabled"]:
        yield "run_monitoring", _run_monitoring(daemon["runMonitoring"])
    if daemon["enabled"] and daemon["runRetries"]["enabled"]:
        retries = daemon["runRetries"]
        yield (
            "run_retries",
            {"enabled": True, **({"max_retries": retries["maxRetries"]} if retries.get("maxRetries") else {})},
        )
    yield "telemetry", {"enabled": values["telemetry"]["enabled"]}
    if values["concurrency"]["enabled"]:
        yield "concurrency", _concurrency(values["concurrency"])


def _configurable(module: str, class_name: str, config: dict | None = None) -> dict:
    return {"module": module, "class": class_name, **({"config": config} if config is not None else {})}


def _scheduler(scheduler: dict) -> dict:
    if scheduler["type"] != "DagsterDaemonScheduler":
        raise UnsupportedValues(f"scheduler.type {scheduler['type']}")
    return _configurable("dagster.core.scheduler", "DagsterDaemonScheduler")


def _postgres(postgresql: dict) -> dict:
    if postgresql["enabled"]:
        raise UnsupportedValues("postgresql.enabled: the chart's own PostgreSQL (its host is the release's service)")
    db = {
        "username": postgresql["postgresqlUsername"],
        "password": {"env": "DAGSTER_PG_PASSWORD"},
        "hostname": postgresql["postgresqlHost"],
        "db_name": postgresql["postgresqlDatabase"],
        "port": postgresql["service"]["port"],
        "params": postgresql["postgresqlParams"],
    }
    if postgresql.get("postgresqlScheme"):
        db["scheme"] = postgresql["postgresqlScheme"]
    return {"postgres_db": db}


def _run_launcher(values: dict, namespace: str, fullname: str) -> dict:
    launcher = values["runLauncher"]
    if launcher["type"] != "K8sRunLauncher":
        raise UnsupportedValues(f"runLauncher.type {launcher['type']}")
    k8s = launcher["config"]["k8sRunLauncher"]
    config: dict[str, Any] = {"load_incluster_config": k8s["loadInclusterConfig"]}
    if k8s.get("kubeconfigFile"):
        config["kubeconfig_file"] = k8s["kubeconfigFile"]
    config["job_namespace"] = k8s.get("jobNamespace") or namespace
    config["image_pull_policy"] = k8s["imagePullPolicy"]
    if values.get("imagePullSecrets"):
        config["image_pull_secrets"] = values["imagePullSecrets"]
    config["service_account_name"] = (
        values.get("global", {}).get("serviceAccountName") or values.get("serviceAccount", {}).get("name") or fullname
    )
    if "image" in k8s:
        raise UnsupportedValues("runLauncher.config.k8sRunLauncher.image: runs use the code location's image")
    config["dagster_home"] = values["global"]["dagsterHome"]
    config["instance_config_map"] = f"{fullname}-instance"
    config["postgres_password_secret"] = values["global"]["postgresqlSecretName"]
    for key, source in (("env_config_maps", "envConfigMaps"), ("env_secrets", "envSecrets")):
        names = [entry["name"] for entry in k8s.get(source) or [] if "name" in entry]
        if names:
            config[key] = names
    for key, source in (
        ("env_vars", "envVars"),
        ("volume_mounts", "volumeMounts"),
        ("volumes", "volumes"),
        ("labels", "labels"),
        ("resources", "resources"),
    ):
        if k8s.get(source):
            config[key] = k8s[source]
    if k8s.get("failPodOnRunFailure"):
        config["fail_pod_on_run_failure"] = True
    if k8s.get("schedulerName"):
        config["scheduler_name"] = k8s["schedulerName"]
    if k8s.get("securityContext"):
        config["security_context"] = k8s["securityContext"]
    if k8s.get("runK8sConfig"):
        names = {
            "containerConfig": "container_config",
            "podSpecConfig": "pod_spec_config",
            "podTemplateSpecMetadata": "pod_template_spec_metadata",
            "jobSpecConfig": "job_spec_config",
            "jobMetadata": "job_metadata",
        }
        unknown = set(k8s["runK8sConfig"]) - set(names)
        if unknown:
            raise UnsupportedValues(f"runK8sConfig keys {sorted(unknown)}")
        config["run_k8s_config"] = {names[key]: value for key, value in k8s["runK8sConfig"].items() if value}
    return _configurable("dagster_k8s", "K8sRunLauncher", config)


def _run_coordinator(coordinator: dict) -> dict:
    if coordinator["type"] != "CustomRunCoordinator":
        raise UnsupportedValues(f"dagsterDaemon.runCoordinator.type {coordinator['type']}")
    custom = coordinator["config"]["customRunCoordinator"]
    return _configurable(custom["module"], custom["class"], custom["config"])


def _compute_logs(manager: dict) -> dict:
    if manager["type"] != "NoOpComputeLogManager":
        raise UnsupportedValues(f"computeLogManager.type {manager['type']}")
    return _configurable("dagster.core.storage.noop_compute_log_manager", "NoOpComputeLogManager")


def _run_monitoring(monitoring: dict) -> dict:
    rendered = {"enabled": True, "start_timeout_seconds": monitoring["startTimeoutSeconds"]}
    # The chart writes these two when they are set, zero included.
    if monitoring.get("cancelTimeoutSeconds") is not None:
        rendered["cancel_timeout_seconds"] = monitoring["cancelTimeoutSeconds"]
    if monitoring.get("maxResumeRunAttempts") is not None:
        rendered["max_resume_run_attempts"] = monitoring["maxResumeRunAttempts"]
    rendered["poll_interval_seconds"] = monitoring["pollIntervalSeconds"]
    rendered["free_slots_after_run_end_seconds"] = monitoring["freeSlotsAfterRunEndSeconds"]
    return rendered


def _concurrency(concurrency: dict) -> dict:
    rendered: dict[str, Any] = {}
    pools, runs = concurrency.get("pools") or {}, concurrency.get("runs") or {}
    pool_keys = {
        "defaultLimit": "default_limit",
        "granularity": "granularity",
        "opGranularityRunBuffer": "op_granularity_run_buffer",
    }
    if set(pools) - set(pool_keys) or set(runs) - {"maxConcurrentRuns", "tagConcurrencyLimits"}:
        raise UnsupportedValues("concurrency keys")
    # Numbers are written when set, zero included; the granularity only when it is not empty.
    rendered_pools = {
        name: pools[key]
        for key, name in pool_keys.items()
        if (pools.get(key) if key == "granularity" else pools.get(key) is not None)
    }
    if rendered_pools:
        rendered["pools"] = rendered_pools
    limits = [
        {"key": limit["key"], **({"value": limit["value"]} if limit.get("value") else {}), "limit": limit["limit"]}
        for limit in runs.get("tagConcurrencyLimits") or []
    ]
    rendered_runs = {
        **({"max_concurrent_runs": runs["maxConcurrentRuns"]} if runs.get("maxConcurrentRuns") is not None else {}),
        **({"tag_concurrency_limits": limits} if limits else {}),
    }
    if rendered_runs:
        rendered["runs"] = rendered_runs
    return rendered


def _check_supported(values: dict) -> None:
    for path, allowed in SUPPORTED.items():
        section = values
        for part in path.split("."):
            section = (section or {}).get(part)
        unknown = set(section or {}) - allowed
        if unknown:
            raise UnsupportedValues(f"{path}: {sorted(unknown)}")
    daemon = values["dagsterDaemon"]
    for name in ("sensors", "schedules", "backfills"):
        if (daemon.get(name) or {}).get("useThreads"):
            raise UnsupportedValues(f"dagsterDaemon.{name}.useThreads")
    if values["retention"]["enabled"]:
        raise UnsupportedValues("retention.enabled")
    if values.get("pythonLogs"):
        raise UnsupportedValues("pythonLogs")
