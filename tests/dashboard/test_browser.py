"""The dashboard in a real headless browser (Debian's chromium driven by selenium through
chromedriver), after real traffic through tritonclient: the model rows with their state and
reason, a live request rate, the BLS edge in the call graph, the tracing-off notice and then
a trace's timeline, and the off switch. A screenshot goes to the test's tmp_path.

Skipped (with the reason) where selenium, chromium or chromedriver is missing; ``.ci/run``
installs Debian's chromium and chromium-driver when it can."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tritonclient.http as httpclient

from tests.conftest import Serving
from tests.dashboard.pages import dashboard_repo, drive
from tests.helpers import WAIT_S
from tests.serverproc import ServerProcess

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="no headless browser: install Debian's chromium and chromium-driver",
)

# Without the networking flags chromium's own connections hang on a closed network.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1400",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    assert CHROMIUM is not None and CHROMEDRIVER is not None
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="modelyard-chromium-")
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
    try:
        driver = webdriver.Chrome(options=options, service=service)
    except WebDriverException as e:
        shutil.rmtree(profile, ignore_errors=True)
        pytest.skip(f"chromium did not start: {e.msg}")
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _wait(driver: Any, predicate: Callable[[Any], Any], what: str) -> Any:
    """The predicate's first truthy value, polled in the page (bounded)."""
    return WebDriverWait(driver, WAIT_S, 0.1).until(predicate, f"the page never showed {what}")


def _cell(driver: Any, model: str, cls: str) -> str:
    cells = driver.find_elements(By.CSS_SELECTOR, f'#models tr[data-model="{model}"] td.{cls}')
    return str(cells[0].text) if cells else ""


class _Traffic:
    """add_sub requests on a thread until stopped, so that the rate stays above zero."""

    def __init__(self, server: ServerProcess) -> None:
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(server,), daemon=True)

    def _run(self, server: ServerProcess) -> None:
        try:
            while not self.stop.is_set():
                drive(server.http_url, server.grpc_url, "add_sub", 4)
        except BaseException as e:
            self.error = e

    def __enter__(self) -> _Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(WAIT_S)
        assert self.error is None, self.error


def test_page_after_traffic(browser: Any, server: ServerProcess, tmp_path: Path) -> None:
    browser.get(f"http://{server.http_url}/dashboard")
    assert browser.title == "modelyard dashboard"
    _wait(browser, lambda d: _cell(d, "add_sub", "state") == "READY", "add_sub READY")
    assert _cell(browser, "py_init_error", "state") == "UNAVAILABLE"
    reason = browser.find_element(By.CSS_SELECTOR, 'tr.reason-row[data-model="py_init_error"]')
    assert "lorem_ipsum" in reason.text
    # Tracing is off: the page says how to turn it on.
    notice = _wait(browser, lambda d: d.find_element(By.ID, "tracing-off"), "the notice")
    _wait(browser, lambda d: notice.is_displayed(), "the tracing-off notice")
    assert "Tracing is off" in notice.text and "--trace-config" in notice.text

    with _Traffic(server):
        drive(server.http_url, server.grpc_url, "bls_add_sub", 3)
        _wait(browser, lambda d: _cell(d, "add_sub", "rate") not in ("", "0.0"), "a rate")
        rate = float(_cell(browser, "add_sub", "rate"))
        total = int(_cell(browser, "add_sub", "total"))
        assert rate > 0 and total > 0
        _wait(browser, lambda d: int(_cell(d, "bls_add_sub", "total") or 0) >= 3, "3 requests")

    # The call graph: the edge in the SVG (with its label) and in the table.
    edge = _wait(
        browser,
        lambda d: d.find_elements(
            By.CSS_SELECTOR, '#graph g.edge[data-caller="bls_add_sub"][data-callee="add_sub"]'
        ),
        "the bls_add_sub -> add_sub edge",
    )[0]
    assert "calls" in edge.find_element(By.TAG_NAME, "text").text
    nodes = {
        n.get_attribute("data-model")
        for n in browser.find_elements(By.CSS_SELECTOR, "#graph g.node")
    }
    assert nodes == {"bls_add_sub", "add_sub"}
    row = browser.find_element(By.CSS_SELECTOR, '#edges tr[data-caller="bls_add_sub"]')
    assert int(row.find_element(By.CSS_SELECTOR, "td.calls").text) >= 3

    # Tracing on at run time: a BLS request's trace, its spans on the timeline.
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
        drive(server.http_url, server.grpc_url, "bls_add_sub", 1)
        trace = _wait(
            browser,
            lambda d: d.find_elements(By.CSS_SELECTOR, '#traces .trace[data-model="bls_add_sub"]'),
            "a bls_add_sub trace",
        )[0]
    finally:
        client.update_trace_settings(settings={"trace_level": ["OFF"]})
        client.close()
    spans = trace.find_elements(By.CSS_SELECTOR, ".span")
    kinds = {(s.get_attribute("data-name"), s.get_attribute("data-model")) for s in spans}
    assert ("compute", "bls_add_sub") in kinds and ("add_sub", "add_sub") in kinds
    bars = trace.find_elements(By.CSS_SELECTOR, ".span .bar")
    assert all(b.size["width"] > 0 for b in bars)
    assert not browser.find_element(By.ID, "tracing-off").is_displayed()

    shot = tmp_path / "dashboard.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000


def test_off_switch(browser: Any, serving: Serving) -> None:
    with serving.server(dashboard_repo(serving), "--allow-dashboard=false") as srv:
        browser.get(f"http://{srv.http_url}/dashboard")
        assert browser.find_element(By.TAG_NAME, "body").text == '{"error":"Not Found"}'
