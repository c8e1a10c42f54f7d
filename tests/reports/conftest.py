"""Fixtures for report tests: copies of the hand-made run directories, and a real headless
Chromium (Debian's chromium + chromedriver, driven by selenium) that records console messages and
every network request a page makes, with DNS disabled so nothing can leave the machine."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "runs"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def copy_run(name: str, dest: Path) -> Path:
    """A copy of tests/data/runs/<name> at dest, so reports are written outside the repo."""
    shutil.copytree(DATA / name, dest, ignore=shutil.ignore_patterns("report.html", "*.js"))
    return dest


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store with the hand-made runs: store/<test>/<timestamp>/ and a `latest` link."""
    root = tmp_path / "store"
    for name, test, ts in (
        ("fenced", "etcd-fenced-pause", "20261129T225000"),
        ("violations", "redis-unfenced-pause", "20261129T230000"),
        ("planted", "planted", "20261129T231000"),
    ):
        run = copy_run(name, root / test / ts)
        (run.parent / "latest").symlink_to(ts)
    return root


@dataclass
class Browser:
    driver: Any  # selenium.webdriver.Chrome

    def get(self, url: str) -> None:
        self.driver.get(url)
        self.driver.execute_script("return 1")  # settle
        self.wait("return document.readyState === 'complete'")

    def wait(self, script: str, timeout_s: float = 15.0) -> Any:
        from selenium.webdriver.support.ui import WebDriverWait

        return WebDriverWait(self.driver, timeout_s).until(
            lambda d: d.execute_script(script)
        )

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def console(self) -> list[dict[str, Any]]:
        """Console messages since the last call."""
        return list(self.driver.get_log("browser"))

    def requests(self) -> list[str]:
        """URLs of every request the page made since the last call."""
        urls = []
        for entry in self.driver.get_log("performance"):
            msg = json.loads(entry["message"])["message"]
            if msg.get("method") == "Network.requestWillBeSent":
                urls.append(msg["params"]["request"]["url"])
        return urls

    def screenshot(self, path: Path, full_page: bool = True) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not full_page:
            self.driver.save_screenshot(str(path))
            return
        height = int(self.js("return document.documentElement.scrollHeight"))
        self.driver.set_window_size(1400, min(max(height, 800), 6000))
        try:
            self.driver.save_screenshot(str(path))
        finally:
            self.driver.set_window_size(1400, 1000)  # the browser is shared by later tests


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("chromium/chromedriver not installed (bash scripts/setup.sh)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="fc-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        # No name resolves: a page that tried to fetch from the network could not.
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        f"--user-data-dir={profile}",
        "--window-size=1400,1000",
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = None
    try:
        driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
        yield Browser(driver)
    finally:
        if driver is not None:
            driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
