"""The auditor's UI: `evidence ui --read-only` as a real webserver on the demo's instance, driven by a real browser.

One module-scoped setup: `evidence demo --months 1` publishes one bundle per demo tenant through Dagster (the
offline_verification check runs in each run); one bundle is then tampered with and the check run again on it alone;
then `evidence ui --read-only` starts on a free port. The GraphQL test needs only the webserver. The browser test
needs Debian's `chromium` and `chromium-driver` (`make test` installs them when run as root) and is skipped, saying
so, where they are missing; it saves a PNG of every page it checks under its tmp_path and asserts on the pages' text
and DOM: the asset graph, a bundle partition's metadata, the verification result of a verified and of a tampered
partition, that a metadata link opens in the read-only UI itself, and that nothing can be launched.
"""

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
import requests
from dagster import AssetKey, AssetRecordsFilter, DagsterInstance, materialize

from evidence_pipeline.audit.verify import verify_bundle
from evidence_pipeline.defs.assets import evidence_bundle, monthly_report, source_revision
from evidence_pipeline.defs.checks import CHECK_NAME, offline_verification
from evidence_pipeline.defs.partitions import range_tags
from evidence_pipeline.defs.resources import EvidenceResource
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.monthly.render import RENDERER_VERSION
from evidence_pipeline.store.local import LocalStore
from evidence_pipeline.synthetic.demo_data import DEMO_TENANTS
from evidence_pipeline_tests.support.dagster_services import stop
from evidence_pipeline_tests.support.tampering import overwrite
from evidence_pipeline_tests.support.verification_check import CHECK_ONLY

# One demo, webserver and browser for both tests: one worker runs them, the slow ones first.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("auditor_ui")]

EVIDENCE = Path(sys.executable).parent / "evidence"
VERIFIED, TAMPERED = "acme-books", "baltic-crafts"  # two of the demo tenants
LAST_TENANTS, NO_SOURCE = list(DEMO_TENANTS)[2:], "zz-no-source"  # a failed range run, away from those two
ASSETS = [source_revision, monthly_report, evidence_bundle, offline_verification]
START_TIMEOUT_S = 180  # the webserver answers in ~10 s here; a loaded 2-core machine can take much longer
PAGE_TIMEOUT_S = 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class AuditorUI:
    url: str
    partitions: dict[str, str]  # tenant -> partition key of its one demo month
    bundles: dict[str, dict]  # tenant -> its evidence_bundle materialization's metadata
    runs: int  # runs on the instance before the UI started
    range_run: str  # the range run in which NO_SOURCE failed at source_revision (TENANT_UNKNOWN); the rest went on
    archive: LocalStore  # the archive the demo published to


@pytest.fixture(scope="module")
def auditor_ui(tmp_path_factory) -> AuditorUI:
    root = tmp_path_factory.mktemp("auditor-ui")
    home = root / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVIDENCE_", "DAGSTER_"))}
    env["EVIDENCE_HOME"] = str(home)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    demo = subprocess.run([EVIDENCE, "demo", "--months", "1"], env=env, capture_output=True, text=True, timeout=600)
    assert demo.returncode == 0, demo.stdout + demo.stderr

    # The instance `evidence demo` used (and `evidence ui` uses): DAGSTER_HOME=$EVIDENCE_HOME/dagster.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home / "dagster"))
        patch.setenv("EVIDENCE_HOME", str(home))
        with DagsterInstance.from_config(str(home / "dagster")) as instance:
            records = instance.fetch_materializations(
                AssetRecordsFilter(asset_key=AssetKey("evidence_bundle")), limit=100
            ).records
            bundles = {}
            for record in records:
                metadata = {k: v.value for k, v in record.asset_materialization.metadata.items()}
                bundles.setdefault(metadata["bundle_key"].split("/")[1], (record.partition_key, metadata))
            assert {VERIFIED, TAMPERED} <= bundles.keys()
            # Someone with write access to the archive changes a published report; the check alone, run again on that
            # partition, finds it.
            key = f"{bundles[TAMPERED][1]['bundle_key']}/report.pdf"
            archive = LocalStore(home / "archive")
            overwrite(None, key, archive.get(key)[:-64] + b"%% tampered".ljust(64, b" "), store=archive)
            evidence = EvidenceResource(home=str(home))
            result = CHECK_ONLY.execute_in_process(
                instance=instance, partition_key=bundles[TAMPERED][0], resources={"evidence": evidence}
            )
            assert result.success and not result.get_asset_check_evaluations()[0].passed
            # A range run of the demo month over the last demo tenants and one the service never knew (a partition
            # added in the launch dialog): that one fails at source_revision, alone; the others are materialized.
            instance.add_dynamic_partitions("tenant", [NO_SOURCE])
            month = bundles[VERIFIED][0].split("|")[0][:7]
            ranged = materialize(
                ASSETS,
                instance=instance,
                resources={"evidence": evidence},
                raise_on_error=False,
                tags=range_tags(TenantMonth(LAST_TENANTS[0], month), TenantMonth(NO_SOURCE, month)),
            )
            assert ranged.success and {
                e.partition.split("|")[1]
                for e in ranged.get_asset_materialization_events()
                if e.asset_key.to_user_string() == "evidence_bundle"
            } == set(LAST_TENANTS)
            runs = len(instance.get_run_records())

    with open(root / "ui.log", "w") as log:
        server = subprocess.Popen(
            [EVIDENCE, "ui", "--read-only", "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            with contextlib.suppress(requests.ConnectionError):
                if requests.get(f"{url}/server_info", timeout=5).ok:
                    break
            assert server.poll() is None and time.monotonic() < deadline, (root / "ui.log").read_text()[-4000:]
            time.sleep(0.5)
        yield AuditorUI(
            url,
            {t: pk for t, (pk, _) in bundles.items()},
            {t: m for t, (_, m) in bundles.items()},
            runs,
            ranged.run_id,
            archive,
        )
    finally:
        stop(server)


def _graphql(url: str, query: str, variables: dict | None = None) -> dict:
    response = requests.post(f"{url}/graphql", json={"query": query, "variables": variables or {}}, timeout=120)
    response.raise_for_status()
    body = response.json()
    assert not body.get("errors"), body["errors"]
    return body["data"]


REFUSED = "__typename ... on UnauthorizedError { message }"
LOCATION = {"repositoryLocationName": "evidence_pipeline", "repositoryName": "__repository__"}


def test_read_only_webserver_refuses_launches_and_wipes_and_serves_each_partitions_verification(auditor_ui):
    url, partitions, runs = auditor_ui.url, auditor_ui.partitions, auditor_ui.runs
    permissions = {
        p["permission"]: p["value"] for p in _graphql(url, "{ permissions { permission value } }")["permissions"]
    }
    assert permissions["launch_pipeline_execution"] is False and permissions["wipe_assets"] is False
    assert not any(permissions.values())

    backfill = _graphql(
        url,
        f"mutation($p: LaunchBackfillParams!) {{ launchPartitionBackfill(backfillParams: $p) {{ {REFUSED} }} }}",
        {
            "p": {
                "partitionNames": [partitions[VERIFIED]],
                "fromFailure": False,
                "assetSelection": [{"path": ["evidence_bundle"]}],
            }
        },
    )
    launch = _graphql(
        url,
        f"mutation($e: ExecutionParams!) {{ launchRun(executionParams: $e) {{ {REFUSED} }} }}",
        {
            "e": {
                "selector": LOCATION | {"jobName": "monthly_evidence"},
                "executionMetadata": {"tags": [{"key": "dagster/partition", "value": partitions[VERIFIED]}]},
            }
        },
    )
    wipe = _graphql(
        url,
        f'mutation {{ wipeAssets(assetPartitionRanges: [{{assetKey: {{path: ["evidence_bundle"]}}}}])'
        f" {{ {REFUSED} }} }}",
    )
    for answer in (backfill["launchPartitionBackfill"], launch["launchRun"], wipe["wipeAssets"]):
        assert answer == {"__typename": "UnauthorizedError", "message": "Authorization failed"}
    # Nothing was launched and nothing was wiped.
    assert _graphql(url, "{ runsOrError { ... on Runs { count } } }")["runsOrError"]["count"] == runs
    materializations = _graphql(
        url,
        '{ assetOrError(assetKey: {path: ["evidence_bundle"]}) { ... on Asset { '
        "assetMaterializations(limit: 100) { partition } } } }",
    )
    # The demo's bundles; the range run re-materialized (converged on) its tenants', and none of NO_SOURCE.
    assert sorted(m["partition"] for m in materializations["assetOrError"]["assetMaterializations"]) == sorted(
        [*partitions.values(), *(partitions[tenant] for tenant in LAST_TENANTS)]
    )

    # What the UI shows for each partition's check: verified, or not verified with its reason codes.
    query = (
        """query($p: String!) { assetCheckExecutions(assetKey: {path: ["evidence_bundle"]}, checkName: "%s",
        partition: $p, limit: 1) { status evaluation { success partition description } } }"""
        % CHECK_NAME
    )
    [verified] = _graphql(url, query, {"p": partitions[VERIFIED]})["assetCheckExecutions"]
    [tampered] = _graphql(url, query, {"p": partitions[TAMPERED]})["assetCheckExecutions"]
    assert verified["status"] == "SUCCEEDED" and verified["evaluation"]["success"] is True
    assert verified["evaluation"]["description"].startswith("verified: all")
    assert tampered["status"] == "FAILED" and tampered["evaluation"]["partition"] == partitions[TAMPERED]
    assert "SUBJECT_DIGEST_MISMATCH" in tampered["evaluation"]["description"]


@pytest.fixture
def browser(tmp_path):
    """Headless Chromium through chromium-driver (Debian's packages), or a skip that says how to get them."""
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and chromedriver):
        pytest.skip(
            "the browser test needs Debian's chromium and chromium-driver (/usr/bin/chromium, "
            "/usr/bin/chromedriver); `make test` installs them when run as root: "
            "apt-get install chromium chromium-driver"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1600,1200",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    driver.set_page_load_timeout(PAGE_TIMEOUT_S)
    try:
        yield driver
    finally:
        driver.quit()


class Page:
    """The browser's current page: waits for text, clicks by visible text, and saves PNGs under ``shots``."""

    def __init__(self, driver, base: str, shots: Path):
        self.driver, self.base, self.shots = driver, base, shots

    def text(self) -> str:
        """The page's visible text, every run of white space as one space (tables render cells on one line or on
        several, depending on their width)."""
        from selenium.webdriver.common.by import By

        return " ".join(self.driver.find_element(By.TAG_NAME, "body").text.split())

    def open(self, path: str, *texts: str) -> str:
        self.driver.get(self.base + path)
        return self.wait_for(*texts)

    def wait_for(self, *texts: str) -> str:
        """The page's text, once it holds every one of ``texts``."""
        deadline = time.monotonic() + PAGE_TIMEOUT_S
        while True:
            text = self.text()
            missing = [t for t in texts if t not in text]
            if not missing:
                return text
            if time.monotonic() > deadline:
                self.save("timeout")
                pytest.fail(f"{self.driver.current_url} never showed {missing}; it shows:\n{text[:3000]}")
            time.sleep(0.25)

    def click(self, text: str) -> None:
        """Click the last visible element whose own text is exactly ``text`` (lists follow headers and axes)."""
        from selenium.webdriver.common.by import By

        deadline = time.monotonic() + PAGE_TIMEOUT_S
        while True:
            found = [
                e
                for e in self.driver.find_elements(By.XPATH, f"//*[normalize-space(text())='{text}']")
                if e.is_displayed()
            ]
            if found:
                found[-1].click()
                return
            if time.monotonic() > deadline:
                pytest.fail(f"no visible {text!r} on {self.driver.current_url}")
            time.sleep(0.25)

    def follow(self, link: str) -> None:
        """Click the metadata link whose text is ``link`` (its address) and switch to the tab it opens."""
        from selenium.webdriver.common.by import By

        tabs = set(self.driver.window_handles)
        anchors = [
            a for a in self.driver.find_elements(By.XPATH, f"//a[normalize-space(text())='{link}']") if a.is_displayed()
        ]
        assert anchors, f"no link {link!r} on {self.driver.current_url}"
        anchors[0].click()
        deadline = time.monotonic() + PAGE_TIMEOUT_S
        while not (opened := set(self.driver.window_handles) - tabs):
            assert time.monotonic() < deadline, f"{link} opened no tab"
            time.sleep(0.25)
        self.driver.switch_to.window(opened.pop())

    def buttons(self, prefix: str) -> list[bool]:
        """Whether each visible button whose text starts with ``prefix`` is enabled."""
        from selenium.common.exceptions import StaleElementReferenceException
        from selenium.webdriver.common.by import By

        def read() -> list[bool]:
            return [
                b.is_enabled()
                for b in self.driver.find_elements(By.TAG_NAME, "button")
                if b.is_displayed() and b.text.strip().startswith(prefix)
            ]

        for _ in range(4):  # the UI may render again between finding the buttons and reading them
            with contextlib.suppress(StaleElementReferenceException):
                return read()
        return read()

    def save(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        assert self.driver.save_screenshot(str(path)), path
        return path


def test_an_auditor_sees_the_graph_a_partitions_metadata_and_verification_and_cannot_launch(
    auditor_ui, browser, tmp_path
):
    url, partitions, bundles = auditor_ui.url, auditor_ui.partitions, auditor_ui.bundles
    page = Page(browser, url, tmp_path)
    saved = []

    # The asset graph: the evidence lineage, with the check on the bundle; nothing can be materialized.
    page.open(
        "/locations/evidence_pipeline/asset-groups/evidence/lineage",
        "source_revision",
        "monthly_report",
        "evidence_bundle",
        "report_preview",
        "Asset checks",
        "document_jobs",
    )  # upstream of the report, from its own group
    saved.append(page.save("1-asset-graph"))
    assert page.buttons("Materialize") and not any(page.buttons("Materialize"))

    # The asset's page says, above its Materialize button, what to select with it (Dagster's launch dialog warns of
    # missing upstream partitions only for one-dimensional partitions).
    page.open(
        "/assets/evidence_bundle",
        "runs this asset alone, which fails UPSTREAM_NOT_MATERIALIZED",
        "select source_revision, monthly_report and evidence_bundle together (or launch the monthly_evidence job)",
    )
    saved.append(page.save("1b-asset-page-says-what-to-select"))
    assert page.buttons("Materialize")
    # Its freshness policy, beside it: due by the month's deadline (evaluated by the daemon, which the read-only UI
    # does not run: "Not evaluated" here).
    page.wait_for("Freshness policy", "Deadline: At 02:00 AM UTC, on day 2 of the month")

    # A bundle partition's page: digests, renderer version, key id and the lineage table.
    bundle = bundles[VERIFIED]
    text = page.open(
        f"/assets/evidence_bundle?view=partitions&partition={quote(partitions[VERIFIED])}",
        partitions[VERIFIED],
        bundle["manifest_sha256"],
        "lineage",
    )
    saved.append(page.save("2-bundle-partition-metadata"))
    for name in ("report_sha256", "unsigned_sha256", "statement_sha256", "manifest_sha256", "source_sha256"):
        assert f"{name} {bundle[name]}" in text
    assert f"renderer_version {RENDERER_VERSION}" in text and f"key_id {bundle['key_id']}" in text
    assert f"signed report.pdf {bundle['report_sha256']}" in text  # the lineage table, rendered
    assert f"statement.dsse.json ({bundle['key_id']}) {bundle['statement_sha256']}" in text
    # Its verification verdict at publication, on the partition itself, and a link to that partition's result.
    checks = len(verify_bundle(auditor_ui.archive, bundle["bundle_key"]).checks)
    assert f"verification verified: all {checks} checks passed" in text
    assert f"verification_checks {checks} of {checks} passed" in text and "verification_codes none" in text
    assert page.buttons("Materialize") and not any(page.buttons("Materialize"))
    # The link, clicked in the read-only UI, opens (in a new tab) the run's log in that same UI, filtered to this
    # partition's evaluation: one event, its verdict and checks; and it is still read-only there.
    page.follow(bundle["verification result"])
    assert browser.current_url.startswith(f"{url}/runs/")
    text = page.wait_for(
        f"Check {CHECK_NAME} succeeded for materialization of evidence_bundle",
        bundle["location"],
        "check result code detail",
        "bundle_complete passed",
    )
    saved.append(page.save("2b-partition-verification-result"))
    assert text.count("ASSET_CHECK_EVA") == 1
    # The way back to the report's partition, from the bundle's, also stays in this UI.
    browser.close()
    browser.switch_to.window(browser.window_handles[0])
    page.follow(bundle["monthly_report partition"])
    assert browser.current_url.startswith(f"{url}/assets/monthly_report?")
    page.wait_for("monthly_report", partitions[VERIFIED])
    assert page.buttons("Materialize") and not any(page.buttons("Materialize"))
    browser.close()
    browser.switch_to.window(browser.window_handles[0])

    # The partition's verification check: verified, and for the tampered bundle, failed with its reason codes.
    page.open(f"/assets/evidence_bundle?view=checks&checkDetail={CHECK_NAME}", CHECK_NAME, "non-blocking")
    page.click("Partitions")
    month = partitions[VERIFIED].split("|")[0]
    assert partitions[TAMPERED].split("|")[0] == month  # the demo's one month, for every tenant
    page.wait_for(month, VERIFIED, TAMPERED)
    page.click(month)
    page.click(VERIFIED)
    page.wait_for(
        partitions[VERIFIED],
        "Passed",
        f"verified: all {checks} checks passed",
        "codes none",
        f"pinned_key_id {bundle['key_id']}",
        f"checks {checks} of {checks} passed",
    )
    saved.append(page.save("3-check-verified"))
    page.click(TAMPERED)
    text = page.wait_for(partitions[TAMPERED], "Failed", "not verified: ", "SUBJECT_DIGEST_MISMATCH", "NOT VERIFIED")
    saved.append(page.save("4-check-not-verified"))
    assert "subject_digest: SUBJECT_DIGEST_MISMATCH: statement subject is not the sha256 of report.pdf" in text
    assert page.buttons("Execute") and not any(page.buttons("Execute"))

    # Read-only: the launchpad is not offered (its address leads back to the job's page), nothing to launch.
    browser.get(f"{url}/locations/evidence_pipeline/jobs/monthly_evidence/playground")
    page.wait_for("monthly_evidence", "View 3 assets")
    assert not browser.current_url.endswith("/playground") and "Launch Run" not in page.text()
    assert page.buttons("Materialize") and not any(page.buttons("Materialize"))
    saved.append(page.save("5-no-launchpad"))

    # The tenant-month that failed in a range run says why in an observation on its own partition: its latest event,
    # one click from its panel (Dagster 1.13's panel shows the metadata of the latest materialization, and of the
    # observations after it; a partition never materialized shows "Latest materialization None"); the others of the
    # run went on.
    failed = f"{month}|{NO_SOURCE}"
    page.open(
        f"/assets/evidence_bundle?view=partitions&partition={quote(failed)}",
        failed,
        "Latest materialization None",
        "View all historical events (1)",
    )
    saved.append(page.save("6-bundle-partition-not-materialized"))
    page.click("View all historical events (1)")
    page.wait_for(f"Historical events for {failed}", "Observation")
    page.click(failed)  # the dialog's row (after the panel's title): it opens to the event's line and metadata
    page.wait_for(
        f"not materialized: run {auditor_ui.range_run[:8]} stopped at source_revision: {NO_SOURCE} "
        f"{month[:7]} TENANT_UNKNOWN: tenant {NO_SOURCE} is not in the tenant registry",
        "reason_code TENANT_UNKNOWN",
    )
    saved.append(page.save("6b-bundle-partition-why"))
    browser.get(url)  # away from the dialog
    observations = _graphql(
        url,
        '{ assetOrError(assetKey: {path: ["evidence_bundle"]}) { ... on Asset { '
        'assetObservations(partitions: ["%s"]) { description metadataEntries { label '
        '... on TextMetadataEntry { text } } } } } }' % failed,
    )
    [observation] = observations["assetOrError"]["assetObservations"]
    assert observation["description"].startswith(
        f"not materialized: run {auditor_ui.range_run[:8]} stopped at "
        f"source_revision: {NO_SOURCE} {month[:7]} TENANT_UNKNOWN: "
    )
    assert {"label": "reason_code", "text": "TENANT_UNKNOWN"} in observation["metadataEntries"]
    # The run succeeded, with one line in its log naming the tenant-month that failed and its code.
    text = page.open(f"/runs/{auditor_ui.range_run}", "Success", "Errored (0)")
    saved.append(page.save("7-range-run"))
    assert "RUN_FAILURE" not in text and "Stack Trace" not in text and "site-packages" not in text
    logs = _graphql(
        url,
        'query($r: ID!) { logsForRun(runId: $r) { ... on EventConnection { events { '
        "... on MessageEvent { message level } } } } }",
        {"r": auditor_ui.range_run},
    )
    assert {
        "message": f"source_revision: 1 of {len(LAST_TENANTS) + 1} tenant-months failed: {NO_SOURCE} "
        f"{month[:7]} TENANT_UNKNOWN; the other {len(LAST_TENANTS)} go on",
        "level": "WARNING",
    } in [event for event in logs["logsForRun"]["events"] if event]

    assert all(path.stat().st_size > 10_000 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for path in saved)
