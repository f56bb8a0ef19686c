"""The MLflow UI shows two probe runs of different models side by side (headless Chromium).

Two tiny CLI probe runs (SmolLM2 and Gemma 3) log to the basic-auth server; Chromium opens the
compare view `#/compare-runs?runs=[...]&experiments=[...]` (MLflow's `Routes.getCompareRunPageRoute`)
with the admin's Basic credentials sent as an extra header over the DevTools protocol, and
the page must render both run names and the `acc` metric. The screenshot lands in
`test-artifacts/mlflow_compare.png` (gitignored) for a human to look at.

Needs `apt-get install -y chromium chromium-driver`; skipped with that command when missing.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import shutil
import time
import urllib.parse

import pytest

from .helpers import REPO, explain, run_factprobe
from .servers import ADMIN_PASSWORD, ADMIN_USER

pytestmark = [pytest.mark.server, pytest.mark.timeout(600), pytest.mark.real_model, pytest.mark.slow]

MODELS = ["smollm2-135m-instruct", "gemma-3-270m"]
SCREENSHOT = REPO / "test-artifacts" / "mlflow_compare.png"


def _browser_paths() -> tuple[str, str]:
    browser = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    driver = shutil.which("chromedriver")
    if not browser or not driver:
        pytest.skip("headless Chromium not found: apt-get install -y chromium chromium-driver")
    return browser, driver


@pytest.fixture
def chrome(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver_path = _browser_paths()
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1600,2000",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path, log_output=str(tmp_path / "chromedriver.log")), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def two_model_runs(servers, factprobe_env, tmp_path) -> dict[str, str]:
    """{model: MLflow run id} of one small IC-LKE run per model (one after the other: run at once on
    two cores they are no faster, and two first runs race to create the experiment)."""
    uri = servers.mlflow.uri
    runs = {}
    for model in MODELS:
        proc = run_factprobe(
            [
                "probe",
                "ic-lke",
                "--model",
                model,
                "--relations",
                "P36",
                "--max-facts-per-relation",
                "4",
                "--examples",
                "10",
                "--choices",
                "10",
                "--out",
                str(tmp_path / model),
                "--tracking-uri",
                uri,
                "--require-tracking",
                "--no-progress",
            ],
            env=factprobe_env,
            cwd=tmp_path,
        )
        assert proc.returncode == 0, explain(proc)
        # the CLI ends with the run's page on the server (tracking/cli.py open_lines)
        found = re.search(r"MLflow run ([0-9a-f]{32}): open " + re.escape(uri.rstrip("/")) + r"/#/experiments/", proc.stdout)
        assert found, explain(proc)
        runs[model] = found.group(1)
    return runs


def test_compare_view_shows_both_models(servers, mlflow_client, two_model_runs, chrome):
    from selenium.webdriver.common.by import By

    uri = servers.mlflow.uri
    runs = {m: mlflow_client.get_run(i) for m, i in two_model_runs.items()}
    assert len({r.info.experiment_id for r in runs.values()}) == 1
    exp_id = next(iter(runs.values())).info.experiment_id
    names = [r.info.run_name for r in runs.values()]
    # CLI runs are named <probe>-<model>-<6 of the config key> (tracking/cli.py run_name)
    assert [n.rsplit("-", 1)[0] for n in names] == [f"ic-lke-{m}" for m in MODELS]
    assert all(len(n.rsplit("-", 1)[1]) == 6 for n in names)
    assert all("accuracy" in r.data.metrics for r in runs.values())

    token = base64.b64encode(f"{ADMIN_USER}:{ADMIN_PASSWORD}".encode()).decode()
    chrome.execute_cdp_cmd("Network.enable", {})
    chrome.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {token}"}})
    query = urllib.parse.urlencode({"runs": json.dumps(list(two_model_runs.values())), "experiments": json.dumps([exp_id])})
    chrome.get(f"{uri}/#/compare-runs?{query}")

    def text() -> str:
        return chrome.find_element(By.TAG_NAME, "body").text

    deadline = time.monotonic() + 90
    while True:
        body = text()
        lines = [ln.strip() for ln in body.splitlines()]
        ready = (
            "Comparing 2 Runs" in body
            and all(n in lines for n in names)
            and "Metrics" in lines
            and "accuracy" in lines[lines.index("Metrics") :]
        )
        if ready or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    SCREENSHOT.parent.mkdir(exist_ok=True)
    _close_assistant_panel(chrome)
    chrome.save_screenshot(str(SCREENSHOT))
    assert ready, f"compare view did not render both runs and `acc` within 90 s; page text:\n{body[:3000]}"
    for run_id in two_model_runs.values():
        assert run_id in body
    for model in MODELS:
        assert model in body  # the `model` parameter row
    assert "not authenticated" not in body.lower()


def _close_assistant_panel(chrome) -> None:
    """The MLflow Assistant side panel hides half the comparison: close it if it is open."""
    from selenium.webdriver.common.by import By

    for button in chrome.find_elements(By.CSS_SELECTOR, "button[aria-label='Close']"):
        with contextlib.suppress(Exception):  # cosmetic only: a stale or hidden button is fine
            if button.is_displayed():
                button.click()
                time.sleep(0.5)


# ---------------------------------------------------------------------------------------------
# issue 21 item 5: a finished local pipeline run, as a newcomer opens it after `make run`

PIPELINE_SCREENSHOT = REPO / "test-artifacts" / "mlflow_pipeline_experiment.png"


@pytest.fixture
def local_pipeline_store(probe_pipeline_run):
    """A finished `factprobe pipeline run probe` (SmolLM2, ic-lke and hgp, 2 facts) in <folder>/mlruns.db:
    the session's run (tests/conftest.py `probe_pipeline_run`), shared with tests/pipelines."""
    return probe_pipeline_run


@pytest.fixture
def plain_mlflow_ui(local_pipeline_store):
    """`mlflow server` on the store, as `make run` tells the user to start it; yields its URL."""
    import socket
    import subprocess
    import sys
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{local_pipeline_store / 'mlruns.db'}",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=local_pipeline_store,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, "mlflow server did not start within 60 s"
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _wait_text(chrome, ok, seconds: float = 90) -> tuple[bool, str]:
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + seconds
    while True:
        body = chrome.find_element(By.TAG_NAME, "body").text
        if ok(body) or time.monotonic() > deadline:
            return ok(body), body
        time.sleep(0.5)


def _add_column(chrome, name: str) -> None:
    """Tick `name` in the runs table's Columns menu, as a user does."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    (button,) = [b for b in chrome.find_elements(By.TAG_NAME, "button") if b.text.strip() == "Columns"][:1]
    button.click()
    time.sleep(1)
    for box in chrome.find_elements(By.CSS_SELECTOR, "input[type='text'], input[type='search'], input:not([type])"):
        if box.is_displayed() and "search" in (box.get_attribute("placeholder") or "").lower():
            box.send_keys(name.split("/")[0])
            break
    time.sleep(1)

    def items() -> list:
        return [e for e in chrome.find_elements(By.XPATH, f"//*[normalize-space(text())='{name}']") if e.is_displayed()]

    if not items():  # the matching group ("Metrics (1)") starts folded
        for group in chrome.find_elements(By.XPATH, "//*[starts-with(normalize-space(text()), 'Metrics (')]"):
            if group.is_displayed():
                group.click()
                time.sleep(1)
                break
    items = items()
    assert items, f"no {name!r} in the Columns menu:\n{chrome.find_element(By.TAG_NAME, 'body').text[-1500:]}"
    items[0].click()
    time.sleep(1)
    chrome.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)


def test_pipeline_experiment_opens_on_runs_with_headline_and_summary(local_pipeline_store, plain_mlflow_ui, chrome):
    """issue 21 item 5: the experiment page opens the runs table, the headline metric column is
    visible, and the parent run's page shows the summary table. Screenshots in test-artifacts/."""
    from mlflow.tracking import MlflowClient

    c = MlflowClient(f"sqlite:///{local_pipeline_store / 'mlruns.db'}")
    exp = c.get_experiment_by_name("factprobe/probe")
    (parent,) = c.search_runs([exp.experiment_id], "tags.`factprobe.role` = 'parent'")
    print(f"screenshots: {PIPELINE_SCREENSHOT.parent}")
    PIPELINE_SCREENSHOT.parent.mkdir(exist_ok=True)

    # the link `make run` prints (scripts/print_latest.py): MLflow 3.17 opens an experiment in the kind its app-wide
    # switch holds (URL workflowType, else the browser's last choice; GenAI by default), not the experiment's tag
    chrome.get(f"{plain_mlflow_ui}/#/experiments/{exp.experiment_id}?workflowType=machine_learning")
    ok, body = _wait_text(chrome, lambda b: parent.info.run_name in b and "Columns" in b)
    _close_assistant_panel(chrome)
    assert "No data" not in body and "/runs" in chrome.current_url, (chrome.current_url, body[:3000])
    assert ok, f"runs table not shown within 90 s ({chrome.current_url}):\n{body[:3000]}"
    # the README's column set: Columns -> `headline/accuracy` (MLflow shows Source, Models, Dataset by default)
    _add_column(chrome, "headline/accuracy")
    ok, body = _wait_text(chrome, lambda b: "headline/accuracy" in b)
    chrome.save_screenshot(str(PIPELINE_SCREENSHOT))
    assert ok, f"`headline/accuracy` column not shown ({chrome.current_url}):\n{body[:3000]}"

    chrome.get(f"{plain_mlflow_ui}/#/experiments/{exp.experiment_id}/runs/{parent.info.run_id}?workflowType=machine_learning")
    ok, body = _wait_text(chrome, lambda b: "95% CI" in b and "ic-lke" in b)
    chrome.save_screenshot(str(PIPELINE_SCREENSHOT.with_name("mlflow_pipeline_parent_run.png")))
    assert ok, f"parent run page without the summary table:\n{body[:3000]}"
