"""The one server fixture: ``serving`` starts the real server (``python -m modelyard serve`` on
port 0, tests/serverproc.py) for a repository or a list of test models, with extra flags, an
execution mode, the endpoints wanted and environment variables, and stops it when the
``with`` block ends, whatever happened inside. A module's fixture picks its own scope::

    @pytest.fixture(scope="module", params=MODES)
    def server(request: pytest.FixtureRequest, serving: Serving) -> Iterator[ServerProcess]:
        with serving.server(models=["bls_echo"], mode=request.param) as srv:
            yield srv

Request helpers (inputs, infer, bounded waits, metrics) are in tests/helpers.py.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import MODELS, make_repo, mode_args
from tests.serverproc import ServerProcess, start_server

ENDPOINTS = ("http", "grpc", "metrics")
START_TIMEOUT_S = 120.0  # a guard for a loaded machine, not a speed limit
# A differential test's setup starts the reference Triton and modelyard and probes both: on a
# loaded 2-core machine that can take longer than the suite's 120 s per test.
REFERENCE_TEST_TIMEOUT_S = 600
LOG_TAIL_LINES = 60  # of each running server's output, shown with a failed test
_running: list[ServerProcess] = []  # servers the ``serving`` fixture started and has not stopped
_stopped: list[ServerProcess] = []  # ... and those it stopped since the current test began


def pytest_configure(config: pytest.Config) -> None:
    """Compile the packages' bytecode once, in the controlling process: the suite starts
    thousands of Python processes (servers, model workers, Ray replicas, CLIs), and an
    editable install has no .pyc files. Where PYTHONDONTWRITEBYTECODE is set (this project's
    CI machines) each of them compiled every module it imported from source again: a quarter
    of an empty server's start-up CPU. Python reads .pyc files whatever that variable says;
    a read-only install keeps what it has."""
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller did it before starting the workers
    import compileall

    import modelyard
    import triton_python_backend_utils

    for package in (modelyard, triton_python_backend_utils):
        compileall.compile_dir(Path(package.__file__).parent, quiet=2)


RAY_SCOPE = "tests/ray"


def _scope(nodeid: str) -> str:
    """The unit pytest-xdist hands to one worker whole (``--dist loadfile``): a test file,
    except that every test that starts Ray shares one, so two Ray instances never run at
    once (on 2 cores each slowed the other past its bounds)."""
    path = nodeid.split("::", 1)[0]
    if path.startswith(RAY_SCOPE + "/") or nodeid.endswith("[tutorials/ray.md]"):
        return RAY_SCOPE
    return path


def _weight(item: pytest.Item) -> int:
    """Longest first, so that no long unit starts last: Ray, then the docs' snippets, then
    the rest in collection order."""
    scope = _scope(item.nodeid)
    if scope == RAY_SCOPE:
        return 0
    if scope.startswith("tests/docs/"):
        return 1
    return 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("reference") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(REFERENCE_TEST_TIMEOUT_S))
    items.sort(key=_weight)  # (stable: files keep their order within a weight)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class _Scheduler(LoadFileScheduling):  # type: ignore[misc]  # (xdist is untyped)
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    config.option.loadscopereorder = False  # the collection's order: longest first
    return _Scheduler(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """A failed test shows the end of each running server's log: a worker that died, a
    model that failed to load, say why only there (CI keeps nothing else)."""
    if call.when == "setup":
        _stopped.clear()
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.failed:
        for srv in _running + _stopped:
            tail = "".join(srv.log[-LOG_TAIL_LINES:])
            report.sections.append((f"server pid {srv.proc.pid}: last lines of its log", tail))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line per skip reason with its count, so a run says why tests did not run (the
    reference Triton, a browser, an optional package missing)."""
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    if not reasons:
        return
    terminalreporter.section("skipped, by reason")
    for reason, count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        terminalreporter.write_line(f"{count:5d}  {reason}")


class Serving:
    """Makes model repositories and runs servers on them (see the module's docstring)."""

    def __init__(self, tmp: pytest.TempPathFactory):
        self._tmp = tmp

    def repo(self, models: Iterable[str] = (), source: Path = MODELS, copy: bool = False) -> Path:
        """A fresh repository holding ``models`` from ``source``: symlinks, or copies (without
        ``__pycache__``) when ``copy`` (the reference Triton writes next to its models)."""
        root = self._tmp.mktemp("repo")
        if not copy:
            return make_repo(root, models, source)
        for name in models:
            shutil.copytree(source / name, root / name,
                            ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
        return root

    @contextmanager
    def server(
        self,
        repo: Path | list[Path] | None = None,
        *args: str,
        models: Sequence[str] = (),
        mode: str | None = None,
        endpoints: Sequence[str] = ENDPOINTS,
        env: Mapping[str, str] | None = None,
        timeout: float = START_TIMEOUT_S,
        stop_timeout: float = 15.0,
    ) -> Iterator[ServerProcess]:
        """Run the server on ``repo`` (or on a fresh repository of ``models``) with ``args``;
        ``mode`` picks the Python backend's execution mode; only ``endpoints`` are served.
        Leaving the block stops it (killed when it has not exited after ``stop_timeout``)."""
        if repo is None:
            repo = self.repo(models)
        flags = [f"--allow-{e}=false" for e in ENDPOINTS if e not in endpoints]
        flags += mode_args(mode) if mode else ()
        srv = start_server(repo, *flags, *args, timeout=timeout, env=dict(env or {}),
                           expect=tuple(endpoints))  # fmt: skip
        _running.append(srv)
        try:
            yield srv
        finally:
            _running.remove(srv)
            _stopped.append(srv)
            srv.stop(stop_timeout)


@pytest.fixture(scope="session")
def serving(tmp_path_factory: pytest.TempPathFactory) -> Serving:
    return Serving(tmp_path_factory)
