"""MkDocs hooks (mkdocs.yml ``hooks:``) that generate pages from the code, so they cannot drift:

* ``<!-- cli-reference -->`` in a page becomes the reference of every ``modelyard``
  subcommand, rendered from ``modelyard.cli.main.build_parser()`` at build time: usage,
  description and one table row per option, with the help text ``--help`` prints.
* Two files outside ``docs/`` join the site as pages: ``benchmarks/RESULTS.md`` as
  ``benchmarks/results.md`` (the benchmark history lives next to the scripts that write it)
  and ``ARCHITECTURE.md`` as ``architecture.md`` (it sits where code readers look first).
"""

from __future__ import annotations

import argparse
import html
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- cli-reference -->"
# page in the site -> file of the repository
OUTSIDE_PAGES = {
    "benchmarks/results.md": ROOT / "benchmarks" / "RESULTS.md",
    "architecture.md": ROOT / "ARCHITECTURE.md",
}


def on_files(files: Files, config: Any) -> Files:
    for page, source in OUTSIDE_PAGES.items():
        files.append(File.generated(config, page, content=source.read_text(encoding="utf-8")))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if MARKER not in markdown:
        return markdown
    from modelyard.cli.main import build_parser

    return markdown.replace(MARKER, cli_reference(build_parser()))


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _cell(text: str) -> str:
    """Help text as one Markdown table cell: HTML, table pipes and emphasis marks escaped."""
    text = html.escape(" ".join(text.split()), quote=False)
    return re.sub(r"([|*_\\`\[\]])", r"\\\1", text)


def _option(action: argparse.Action) -> str:
    """The option's names with its argument, as ``--help`` shows them."""
    metavar = action.metavar or (action.dest.upper() if action.option_strings else action.dest)
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    if action.choices and not action.metavar:
        metavar = "{" + ",".join(str(c) for c in action.choices) + "}"
    if not action.option_strings:
        return f"`{metavar}`"
    if action.nargs == 0:
        return ", ".join(f"`{name}`" for name in action.option_strings)
    arg = f"[{metavar}]" if action.nargs == "?" else metavar
    return ", ".join(f"`{name} {arg}`" for name in action.option_strings)


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = parser._get_formatter()
    return formatter._expand_help(action) if action.help else ""


def parser_reference(name: str, parser: argparse.ArgumentParser) -> str:
    """One subcommand: its usage, description and a table per group of options."""
    out = [f"## `{name}`", ""]
    first, *rest = parser.format_usage().strip().splitlines()
    usage = "\n".join([first.removeprefix("usage: "), *(line[len("usage: ") :] for line in rest)])
    out += ["```text", usage, "```", ""]
    if parser.description:
        out += [parser.description, ""]
    for group in parser._action_groups:
        actions = [
            a
            for a in group._group_actions
            if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)
        ]
        if not actions:
            continue
        title = group.title or "options"
        out += [f"**{title}**", ""]
        if group.description:
            out += [group.description, ""]
        out += ["| option | description |", "|---|---|"]
        out += [f"| {_option(a)} | {_cell(_help(parser, a))} |" for a in actions]
        out.append("")
    return "\n".join(out)


def cli_reference(parser: argparse.ArgumentParser) -> str:
    out = []
    for name, sub in _subcommands(parser).items():
        out.append(parser_reference(f"modelyard {name}", sub))
    return "\n".join(out)
