"""The dashboard in a real headless browser (Debian's chromium driven by selenium through
chromedriver), after real traffic through tritonclient: the model rows with their state and
reason, a live request rate, refused requests among the errors, each figure's window,
modelyard's version, the BLS edge and an ensemble's steps in the call graph, the tracing-off
notice and then a trace's timeline, the traces' model filter and pause, and the off switch.
A screenshot goes to the test's tmp_path.

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

import modelyard
from tests.conftest import Serving
from tests.dashboard.pages import dashboard_repo, drive, get, refuse, stream
from tests.helpers import WAIT_S, wait_until
from tests.serverproc import ServerProcess

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
from selenium.common.exceptions import (  # noqa: E402
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
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
    """The cell's text. The page rebuilds its table as numbers arrive: a cell found just before
    a rebuild is looked up again in the new table (a bounded number of times)."""
    for _ in range(4):
        cells = driver.find_elements(By.CSS_SELECTOR, f'#models tr[data-model="{model}"] td.{cls}')
        try:
            return str(cells[0].text) if cells else ""
        except StaleElementReferenceException:
            continue
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
    header = browser.find_element(By.ID, "server").text
    assert f"{modelyard.__version__} · id triton · Triton protocol 2.51.0" == header
    heads = [
        " ".join(th.text.split()) for th in browser.find_elements(By.CSS_SELECTOR, "#models th")
    ]
    assert "req/s (10 s)" in heads and "errors (incl. refused) (10 s)" in heads
    assert "total (since load)" in heads and "req/s (last 60 s)" in heads
    assert "(since start)" in browser.find_element(By.CSS_SELECTOR, "#graph-section h2").text
    assert _cell(browser, "py_init_error", "state") == "UNAVAILABLE"
    reason = browser.find_element(By.CSS_SELECTOR, 'tr.reason-row[data-model="py_init_error"]')
    assert "lorem_ipsum" in reason.text
    # Tracing is off: the page says how to turn it on.
    notice = _wait(browser, lambda d: d.find_element(By.ID, "tracing-off"), "the notice")
    _wait(browser, lambda d: notice.is_displayed(), "the tracing-off notice")
    assert "Tracing is off" in notice.text and "--trace-config" in notice.text

    with _Traffic(server):
        drive(server.http_url, server.grpc_url, "bls_add_sub", 3)
        drive(server.http_url, server.grpc_url, "ensemble_add_sub", 2)
        refuse(server.http_url, server.grpc_url, "ensemble_add_sub", 2)
        _wait(browser, lambda d: _cell(d, "add_sub", "rate") not in ("", "0.0"), "a rate")
        _wait(browser, lambda d: _cell(d, "ensemble_add_sub", "errors") == "2", "2 refused")
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
    assert edge.get_attribute("data-kind") == "bls"
    # The ensemble: a node of its own kind, its steps as edges of theirs.
    _wait(
        browser,
        lambda d: len(d.find_elements(By.CSS_SELECTOR, '#graph g.edge[data-kind="ensemble"]')) == 2,
        "the ensemble's two step edges",
    )
    nodes = {
        n.get_attribute("data-model"): n.get_attribute("data-kind")
        for n in browser.find_elements(By.CSS_SELECTOR, "#graph g.node")
    }
    assert nodes == {"bls_add_sub": "model", "add_sub": "model", "ensemble_add_sub": "ensemble"}
    row = browser.find_element(By.CSS_SELECTOR, '#edges tr[data-caller="bls_add_sub"]')
    assert int(row.find_element(By.CSS_SELECTOR, "td.calls").text) >= 3
    row = browser.find_element(By.CSS_SELECTOR, '#edges tr[data-callee="bls_add_sub"]')
    assert row.get_attribute("data-kind") == "ensemble"
    assert row.find_element(By.CSS_SELECTOR, "td.kind").text == "ensemble step"

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


def test_first_response_of_a_decoupled_model(browser: Any, server: ServerProcess) -> None:
    browser.get(f"http://{server.http_url}/dashboard")
    _wait(browser, lambda d: _cell(d, "repeat", "state") == "READY", "repeat READY")
    heads = [
        " ".join(th.text.split()) for th in browser.find_elements(By.CSS_SELECTOR, "#models th")
    ]
    assert "first response (10 s)" in heads
    stream(server.grpc_url, 3)
    shown = _wait(
        browser,
        lambda d: " / " in _cell(d, "repeat", "first") and _cell(d, "repeat", "first"),
        "repeat's first response",
    )
    p50, p99 = shown.split(" / ")
    assert p50.endswith(("µs", "ms", " s")) and p99.endswith(("µs", "ms", " s")), shown
    drive(server.http_url, server.grpc_url, "add_sub", 1)
    assert _cell(browser, "add_sub", "first") == ""  # not decoupled: its latency says it


def _shown(driver: Any) -> list[tuple[str, str]]:
    """(trace id, model) of every trace on the page."""
    return [
        (str(t.get_attribute("data-trace-id")), str(t.get_attribute("data-model")))
        for t in driver.find_elements(By.CSS_SELECTOR, "#traces .trace")
    ]


def _polls(driver: Any) -> int:
    return int(driver.find_element(By.ID, "status").get_attribute("data-polls") or 0)


def _stored_ids(server: ServerProcess, model: str) -> set[str]:
    status, answer = get(f"http://{server.http_url}/dashboard/api/traces?model={model}")
    assert status == 200
    return {t["trace_id"] for t in answer.json()["traces"]}


def test_traces_filter_and_pause(browser: Any, server: ServerProcess) -> None:
    browser.get(f"http://{server.http_url}/dashboard")
    select = _wait(
        browser,
        lambda d: (
            d.find_elements(By.CSS_SELECTOR, '#trace-model option[value="add_sub"]')
            and Select(d.find_element(By.ID, "trace-model"))
        ),
        "add_sub in the model filter",
    )
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
        # The filter: only add_sub's own requests, not the BLS caller's.
        select.select_by_value("add_sub")
        drive(server.http_url, server.grpc_url, "bls_add_sub", 1)
        drive(server.http_url, server.grpc_url, "add_sub", 1)
        _wait(
            browser,
            lambda d: (shown := _shown(d)) and {m for _, m in shown} == {"add_sub"},
            "add_sub's traces only",
        )
        assert browser.find_element(By.ID, "traces").get_attribute("data-model") == "add_sub"

        # Paused: later traces are stored but the page keeps what it shows.
        browser.find_element(By.ID, "trace-pause").click()
        _wait(browser, lambda d: d.find_element(By.ID, "traces-paused").is_displayed(), "paused")
        assert browser.find_element(By.ID, "trace-pause").text == "Resume"
        shown = _shown(browser)
        drive(server.http_url, server.grpc_url, "add_sub", 1)
        old = {i for i, _ in shown}
        new = wait_until(lambda: _stored_ids(server, "add_sub") - old, what="a new add_sub trace")
        polls = _polls(browser)
        _wait(browser, lambda d: _polls(d) >= polls + 2, "two polls after the new trace")
        assert _shown(browser) == shown

        # Resumed: the new trace comes in.
        browser.find_element(By.ID, "trace-pause").click()
        _wait(browser, lambda d: new & {i for i, _ in _shown(d)}, "the new trace after resuming")
        assert not browser.find_element(By.ID, "traces-paused").is_displayed()
    finally:
        client.update_trace_settings(settings={"trace_level": ["OFF"]})
        client.close()


def test_off_switch(browser: Any, serving: Serving) -> None:
    with serving.server(dashboard_repo(serving), "--allow-dashboard=false") as srv:
        browser.get(f"http://{srv.http_url}/dashboard")
        assert browser.find_element(By.TAG_NAME, "body").text == '{"error":"Not Found"}'
