"""The documentation site: ``mkdocs build --strict`` succeeds, and every code block of every
page in docs/ runs, by the rules in tests/docs/snippets.py (Python blocks against a real
server started on port 0, shell blocks for real; a block that cannot run here is marked
``<!-- not-run: reason -->`` and counted)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from modelyard.config.pbtxt import parse_config_text
from tests.conftest import START_TIMEOUT_S as SERVER_START_TIMEOUT_S
from tests.conftest import Serving
from tests.docs.snippets import (
    LANGUAGES,
    Page,
    Snippet,
    console_commands,
    defines_tests,
    join_continuations,
    pages,
    rewrite_urls,
    server_command,
    shorten_bench,
)
from tests.ray.conftest import START_TIMEOUT_S as RAY_START_TIMEOUT_S
from tests.serverproc import ServerProcess, start_server

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = pages(DOCS)
COMMAND_TIMEOUT_S = 180.0  # a guard against a hang on a loaded machine, not a speed limit
BUILD_TIMEOUT_S = 300.0
_OPENAI = re.compile(r"Started OpenAIService at [\d.]+:(\d+)")

pytest.importorskip("mkdocs", reason="the docs extra (mkdocs) is not installed")


@pytest.mark.timeout(BUILD_TIMEOUT_S + 60)
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # MkDocs 2's banner, not a warning
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    site = tmp_path / "site"
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for flag in ("--model-repository", "--trace-config", "--concurrency", "--load"):
        assert flag in cli, f"the generated CLI reference lacks {flag}"
    assert (
        "get_input_tensor_by_name" in (site / "reference" / "pb-utils" / "index.html").read_text()
    )
    assert "load_model" in (site / "reference" / "testing-api" / "index.html").read_text()
    assert (site / "benchmarks" / "results" / "index.html").is_file()


def test_every_block_has_a_known_language_and_not_run_blocks_a_reason() -> None:
    not_run: list[str] = []
    for page in PAGES:
        for s in page.snippets:
            assert s.lang in LANGUAGES, f"{s.where}: language {s.lang!r} not in {LANGUAGES}"
            if s.not_run is not None:
                assert s.not_run, f"{s.where}: <!-- not-run --> without a reason"
                not_run.append(f"{s.where}: {s.not_run}")
    runnable = [s for p in PAGES for s in p.snippets if s.lang != "text" and s.not_run is None]
    # Most of the documentation runs; the rest says why not (printed with -v -s).
    print(f"{len(runnable)} blocks run, {len(not_run)} not run:", *not_run, sep="\n  ")
    assert len(not_run) < len(runnable) / 4, not_run


class PageRun:
    """Runs one page's blocks in order in its working folder, with at most one server."""

    def __init__(self, page: Page, workdir: Path, serving: Serving, stack: ExitStack):
        self.page, self.workdir, self.serving, self.stack = page, workdir, serving, stack
        self.server: ServerProcess | None = None
        self.server_stack: ExitStack | None = None
        self.namespace: dict[str, Any] = {"__name__": "__docs__"}
        self.pending_tests: list[tuple[Snippet, str]] = []
        self.env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1",
        }

    @property
    def urls(self) -> dict[str, str] | None:
        if self.server is None:
            return None
        urls = {"http": self.server.http_url, "grpc": self.server.grpc_url,
                "metrics": self.server.metrics_url}  # fmt: skip
        openai = _OPENAI.search(self.server.output())
        if openai:
            urls["openai"] = f"127.0.0.1:{openai.group(1)}"
        return urls

    def start(self, command: str, args: list[str], where: str) -> None:
        self.flush_tests()
        if self.server_stack is not None:
            self.server_stack.close()
        self.server_stack = self.stack.enter_context(ExitStack())
        if command == "dev":
            repo, *rest = args
            srv = start_server([self.workdir / repo], *rest, command="dev", env=self.env)
            self.server_stack.callback(srv.stop)
            srv.wait_for_log("for changes")  # edits from now on reload (dev.py's line)
        else:
            # A Ray page's server deploys replicas: on a loaded 2-core machine that takes
            # minutes (the Ray tests' guard), not the single server's seconds.
            timeout = RAY_START_TIMEOUT_S if "--ray" in args else SERVER_START_TIMEOUT_S
            srv = self.server_stack.enter_context(
                self.serving.server([], *args, env=self.env, timeout=timeout)
            )
        self.server = srv
        assert srv.proc.poll() is None, f"{where}: the server exited\n{srv.output()}"

    def run(self, snippet: Snippet) -> None:
        if snippet.not_run is not None:
            return
        if snippet.file:  # written as it is: the blocks after it use it (or show it broken)
            path = self.workdir / snippet.file
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(snippet.code)
            return
        if snippet.lang == "text":
            return
        if not (snippet.lang == "python" and defines_tests(snippet.code)):
            self.flush_tests()
        if snippet.lang == "python":
            self.python(snippet)
        elif snippet.lang in ("sh", "console"):
            script = snippet.code if snippet.lang == "sh" else console_commands(snippet.code)
            self.shell(snippet, script)
        elif snippet.lang == "pbtxt":
            parse_config_text(snippet.code, snippet.where)
        elif snippet.lang == "json":
            json.loads(snippet.code)

    def python(self, snippet: Snippet) -> None:
        code = rewrite_urls(snippet.code, self.urls, snippet.where)
        if defines_tests(code):  # run with the page's next test blocks, in one pytest
            self.pending_tests.append((snippet, code))
            return
        try:
            exec(compile(code, snippet.where, "exec"), self.namespace)
        except Exception as e:
            server = self.server.output() if self.server else ""
            raise AssertionError(f"{snippet.where}: {type(e).__name__}: {e}\n{server}") from e

    def flush_tests(self) -> None:
        """Run the pending pytest blocks, each a file of one folder, in one pytest process."""
        if not self.pending_tests:
            return
        folder = Path(tempfile.mkdtemp(dir=self.workdir, prefix="snippets_"))
        for snippet, code in self.pending_tests:
            (
                folder / f"test_{Path(snippet.page).stem}_{snippet.line}.py".replace("-", "_")
            ).write_text(code)
        where = ", ".join(s.where for s, _ in self.pending_tests)
        self.pending_tests.clear()
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder)],
            cwd=self.workdir, env=self.env, capture_output=True, text=True,
            timeout=COMMAND_TIMEOUT_S,
        )  # fmt: skip
        assert run.returncode == 0, f"{where}: pytest failed\n{run.stdout}{run.stderr}"

    def shell(self, snippet: Snippet, script: str) -> None:
        """The script's lines in order; a line that starts a server starts the page's server
        once the lines before it have run."""
        lines: list[str] = []
        for line in join_continuations(script):
            started = server_command(line) if snippet.exit == 0 else None
            if started:
                self.script(snippet, lines)
                lines = []
                self.start(*started, where=snippet.where)
            else:
                lines.append(shorten_bench(line))
        self.script(snippet, lines)

    def script(self, snippet: Snippet, lines: list[str]) -> None:
        if not lines:
            return
        body = rewrite_urls("\n".join(lines), self.urls, snippet.where)
        run = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", body], cwd=self.workdir, env=self.env,
            capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
        )  # fmt: skip
        assert run.returncode == snippet.exit, (
            f"{snippet.where}: exit {run.returncode}, expected {snippet.exit}\n"
            f"$ {body}\n{run.stdout}{run.stderr}"
        )


@contextmanager
def working_folder(tmp: Path) -> Iterator[Path]:
    """A folder that reads as the repository root (a link per top-level entry), so blocks use
    paths like examples/model_repository while what they write stays out of the checkout."""
    work = tmp / "root"
    work.mkdir()
    for entry in ROOT.iterdir():
        if not entry.name.startswith(".") and entry.name not in ("site",):
            (work / entry.name).symlink_to(entry)
    old = Path.cwd()
    os.chdir(work)
    try:
        yield work
    finally:
        os.chdir(old)


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "page", [p for p in PAGES if any(s.lang != "text" for s in p.snippets)], ids=lambda p: p.name
)
def test_page_blocks_run(page: Page, serving: Serving, tmp_path: Path) -> None:
    with working_folder(tmp_path) as work, ExitStack() as stack:
        runner = PageRun(page, work, serving, stack)
        for step in page.steps():
            if isinstance(step, str):
                started = server_command(f"modelyard serve {step}")
                assert started, step
                runner.start(*started, where=f"docs/{page.name}")
            else:
                runner.run(step)
        runner.flush_tests()
