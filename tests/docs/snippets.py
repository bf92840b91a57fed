"""The fenced code blocks of the documentation pages, and the rules by which
tests/docs/test_docs.py runs them (the pure part: parsing and rewriting; no server, no process).

A block's language says what is done with it:

* ``python``: executed; the blocks of one page share one namespace, run in order. A block that
  defines ``test_*`` functions is a pytest file instead: it is written out and run with
  ``python -m pytest``, and must pass.
* ``sh``: a shell script (``bash -e``), run for real. A ``modelyard serve ...`` or
  ``modelyard dev ...`` line starts the page's server (below) instead of running in the script.
* ``console``: lines starting ``$ `` are commands, run as ``sh`` blocks run; the rest is
  sample output, not compared (paths and times differ).
* ``pbtxt``: model configuration text, parsed as a ``ModelConfig`` (a fragment is a config
  that sets only those fields).
* ``json``: parsed as JSON.
* ``text``: output, logs and trees: not code, nothing is run.

Directives, HTML comments on the lines right above a block (invisible on the site):

* ``<!-- not-run: REASON -->``: the block is not run (a GPU, a remote cluster, an install); the
  reason is required and the test counts these.
* ``<!-- file: PATH -->``: the block is the content of file PATH (relative to the page's working
  folder), written there as it is (not run, not parsed: the blocks after it use it, or show
  what a broken file does).
* ``<!-- exit: N -->``: a shell block's expected exit status (default 0); in such a block a
  serve line is an ordinary command (a command line that must fail).
* ``<!-- server: ARGS -->``: start ``modelyard serve ARGS`` for the page's later blocks, as a
  visible ``modelyard serve ARGS`` line would.

Servers, ports and URLs: every server runs on port 0 (the port and address flags of a serve
line are dropped; ``--openai-port`` becomes 0) and the blocks after it reach it through
``localhost:8000`` (HTTP), ``localhost:8001`` (gRPC), ``localhost:8002`` (metrics) and
``localhost:9000`` (the OpenAI frontend), or the same ports of ``127.0.0.1``, which are
rewritten to the ports it bound. ``modelyard bench`` lines run shortened: ``--duration``, ``--warmup`` and ``--requests``
are replaced by ``--duration 0.5 --warmup 0.2`` (a sequence model needs its warm-up).

Working folder: each page's blocks run in a fresh folder that holds a symbolic link to every
top-level entry of the repository, so paths read as from the repository root
(``examples/model_repository``) while whatever a block writes stays out of the checkout.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

LANGUAGES = {"python", "sh", "console", "pbtxt", "json", "text"}
_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<lang>[\w+-]*)[^\n]*$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*(not-run|file|exit|server)\s*:?\s*(.*?)\s*-->\s*$")
_SERVER_DIRECTIVE = re.compile(r"^\s*<!--\s*server\s*:\s*(.*?)\s*-->\s*$")
PORTS = {"8000": "http", "8001": "grpc", "8002": "metrics", "9000": "openai"}
_URL = re.compile(r"(?:localhost|127\.0\.0\.1):(8000|8001|8002|9000)\b")
_DROPPED_SERVE_FLAGS = {
    f"--{e}-{k}" for e in ("http", "grpc", "metrics") for k in ("port", "address")
}
BENCH_SHORT = ["--duration", "0.5", "--warmup", "0.2"]
_BENCH_DROPPED = {"--duration", "--warmup", "--requests"}


@dataclass
class Snippet:
    """One fenced block of a page, with the directives above it."""

    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    not_run: str | None = None  # the reason, when marked not-run ("" when marked without one)
    file: str | None = None
    exit: int = 0

    @property
    def where(self) -> str:
        return f"docs/{self.page}:{self.line}"


@dataclass
class Page:
    """A page's blocks in order, and its invisible server directives (line -> serve args)."""

    name: str
    snippets: list[Snippet] = field(default_factory=list)
    servers: dict[int, str] = field(default_factory=dict)

    def steps(self) -> list[Snippet | str]:
        """Blocks and server directives in page order (a str is a server's arguments)."""
        items: list[tuple[int, Snippet | str]] = [(s.line, s) for s in self.snippets]
        items += list(self.servers.items())
        return [item for _, item in sorted(items, key=lambda kv: kv[0])]


def parse_page(name: str, text: str) -> Page:
    """Every fenced block of ``text`` (the page ``name``, relative to docs/) with its
    directives; ValueError for an unclosed block."""
    page = Page(name)
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            s = _SERVER_DIRECTIVE.match(lines[i])
            if s:
                page.servers[i + 1] = s.group(1)
            i += 1
            continue
        indent, fence = len(m.group("indent")), m.group("fence")
        end = i + 1
        while end < len(lines) and lines[end].strip() != fence:
            end += 1
        if end == len(lines):
            raise ValueError(f"docs/{name}:{i + 1}: unclosed code block")
        body = "\n".join(line[indent:] for line in lines[i + 1 : end]) + "\n"
        snippet = Snippet(name, i + 1, m.group("lang"), body)
        _apply_directives(snippet, lines, i)
        page.snippets.append(snippet)
        i = end + 1
    return page


def _apply_directives(snippet: Snippet, lines: list[str], fence: int) -> None:
    j = fence - 1
    while j >= 0 and lines[j].strip() and (d := _DIRECTIVE.match(lines[j])):
        kind, value = d.group(1), d.group(2)
        if kind == "not-run":
            snippet.not_run = value
        elif kind == "file":
            snippet.file = value
        elif kind == "exit":
            snippet.exit = int(value)
        j -= 1


def join_continuations(script: str) -> list[str]:
    """The logical lines of a shell script: backslash continuations joined, blank lines and
    whole-line comments dropped."""
    out: list[str] = []
    pending = ""
    for raw in script.splitlines():
        line = raw.rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        if line.strip() and not line.lstrip().startswith("#"):
            out.append(line.strip())
    if pending.strip():
        out.append(pending.strip())
    return out


def console_commands(block: str) -> str:
    """The commands of a ``console`` block (its ``$ `` lines, continuations included)."""
    commands: list[str] = []
    lines = block.splitlines()
    k = 0
    while k < len(lines):
        if lines[k].startswith("$ "):
            command = lines[k][2:]
            while command.endswith("\\") and k + 1 < len(lines):
                k += 1
                command = command[:-1] + " " + lines[k].strip()
            commands.append(command)
        k += 1
    return "\n".join(commands) + "\n"


def server_command(line: str) -> tuple[str, list[str]] | None:
    """``("serve"|"dev", args)`` for a line that starts a server, else None (a line asking for
    ``--help`` or ``--version`` starts none); the port and address flags are dropped (the
    test's server takes port 0) and a trailing comment goes."""
    if not re.match(r"modelyard\s+(serve|dev)\b", line):
        return None
    words = shlex.split(line, comments=True)
    if {"-h", "--help", "--version"} & set(words):
        return None
    args = drop_flags(words[2:], _DROPPED_SERVE_FLAGS | {"--openai-port"})
    if any(w.split("=", 1)[0] == "--openai-port" for w in words):
        args += ["--openai-port", "0"]
    return words[1], args


def drop_flags(words: list[str], names: set[str]) -> list[str]:
    """``words`` without the flags ``names`` (as ``--flag value`` or ``--flag=value``)."""
    out: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        name = word.split("=", 1)[0]
        if name in names:
            skip = "=" not in word
            continue
        out.append(word)
    return out


def shorten_bench(line: str) -> str:
    """A ``modelyard bench`` line with a short measurement (see the module docstring)."""
    if not re.match(r"modelyard\s+bench\b", line):
        return line
    words = shlex.split(line, comments=True)
    return shlex.join(drop_flags(words, _BENCH_DROPPED) + BENCH_SHORT)


def rewrite_urls(code: str, urls: dict[str, str] | None, where: str) -> str:
    """``localhost:8000/8001/8002`` replaced by the page server's HTTP, gRPC and metrics
    addresses; AssertionError when the code needs a server and the page started none."""
    if not _URL.search(code):
        return code
    if urls is None:
        raise AssertionError(f"{where}: the block talks to localhost:800x, but no server runs")

    def address(m: re.Match[str]) -> str:
        key = PORTS[m.group(1)]
        assert key in urls, f"{where}: the block talks to {key}, which the server does not serve"
        return urls[key]

    return _URL.sub(address, code)


def defines_tests(code: str) -> bool:
    return re.search(r"^(async )?def test_\w*\(", code, re.MULTILINE) is not None


def pages(docs: Path) -> list[Page]:
    return [
        parse_page(str(p.relative_to(docs)), p.read_text(encoding="utf-8"))
        for p in sorted(docs.rglob("*.md"))
    ]
