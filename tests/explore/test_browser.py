"""The explorer's page in a real browser: headless Chromium through Selenium.

Opens the npu page (a Tile dense layer on ``examples/npu``) and the light
ResNet-50 page, checks that the browser logged no errors, that every section
renders SVG with a non-empty size, and that pointing at a buffer would name it
(its rectangle carries a ``<title>``).  Screenshots of every section go to
``build/explorer/`` (CI keeps them as artifacts).  Skipped, with the reason,
only where Chromium, its driver or Selenium is not installed (``.ci/run``
installs Debian's ``chromium`` and ``chromium-driver``).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

SHOTS = Path(__file__).resolve().parents[2] / "build" / "explorer"
SECTIONS = ("passes", "memory", "kernels", "traffic")


def _browser_or_skip():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    binary = next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p),
        None,
    )
    driver = shutil.which("chromedriver")
    if binary is None or driver is None:
        reason = "Chromium is not installed" if binary is None else "chromedriver is not installed"
        print(f"skipping the browser test: {reason} (apt-get install chromium chromium-driver)")
        pytest.skip(f"{reason} (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1300,950"):  # fmt: skip
        options.add_argument(arg)
    options.binary_location = binary
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


@pytest.fixture(scope="module")
def browser():
    driver = _browser_or_skip()
    yield driver
    driver.quit()


def _check_page(browser, page: Path, name: str) -> None:
    start = time.perf_counter()
    browser.get(page.as_uri())
    assert browser.execute_script("return document.readyState") == "complete"
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == [], errors
    SHOTS.mkdir(parents=True, exist_ok=True)
    for key in SECTIONS:
        sizes = browser.execute_script(
            "return Array.from(document.querySelectorAll('#' + arguments[0] + ' svg'))"
            ".map(s => { const r = s.getBoundingClientRect();"
            " return [r.width, r.height, s.querySelectorAll('path').length]; })",
            key,
        )
        assert sizes, f"{name}: section {key} has no SVG"
        assert all(w > 100 and h > 100 and paths > 0 for w, h, paths in sizes), (key, sizes)
        browser.execute_script("document.getElementById(arguments[0]).scrollIntoView()", key)
        browser.save_screenshot(str(SHOTS / f"{name}-{key}.png"))
    titled = browser.execute_script(
        "return Array.from(document.querySelectorAll('#memory svg g[id] > title'))"
        ".map(t => t.textContent)"
    )
    assert titled and all("live:" in t for t in titled)
    assert time.perf_counter() - start < 20


def test_npu_page_in_chromium(browser, npu_page: Path) -> None:
    _check_page(browser, npu_page, "mlp-npu")


def test_resnet_page_in_chromium(browser, resnet_page: Path) -> None:
    _check_page(browser, resnet_page, "light-resnet50-cpu")
