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
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1600,2000", f"--user-data-dir={tmp_path / 'chromium-profile'}"):
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
        proc = run_factprobe(["probe", "ic-lke", "--model", model, "--relations", "P36", "--max-facts-per-relation", "4",
                              "--examples", "10", "--choices", "10", "--out", str(tmp_path / model), "--tracking-uri", uri,
                              "--require-tracking", "--no-progress"], env=factprobe_env, cwd=tmp_path)
        assert proc.returncode == 0, explain(proc)
        found = re.search(r"MLflow run ([0-9a-f]{32}) at " + re.escape(uri), proc.stdout)
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
    assert names == [f"ic-lke-{m}" for m in MODELS]
    assert all("acc" in r.data.metrics for r in runs.values())

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
        ready = ("Comparing 2 Runs" in body and all(n in lines for n in names)
                 and "Metrics" in lines and "acc" in lines[lines.index("Metrics"):])
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
