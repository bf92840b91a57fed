"""docs/reference/triton-flags.md stays true: each row's status matches what ``modelyard
serve`` accepts now (a flag added to the CLI fails this test until its row is updated), and
the rows are every flag of Triton 2.51's ``tritonserver --help`` (checked against the
reference Triton where it is installed)."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
from pathlib import Path

import pytest

from modelyard.cli.main import build_parser
from tests.reference import reference_home

TABLE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "triton-flags.md"
_ROW = re.compile(r"^\| `(--[a-z0-9-]+)` \| (supported|accepted, ignored|not yet) \|")
ACCEPTED = ("supported", "accepted, ignored")


def rows() -> dict[str, str]:
    found: dict[str, str] = {}
    for line in TABLE.read_text().splitlines():
        m = _ROW.match(line)
        if m:
            assert m.group(1) not in found, f"{m.group(1)} has two rows"
            found[m.group(1)] = m.group(2)
    return found


def serve_flags() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name for action in sub.choices["serve"]._actions for name in action.option_strings}


def test_each_rows_status_is_what_serve_accepts() -> None:
    accepted = serve_flags()
    wrong = [
        f"{flag}: the table says '{status}', but serve {'takes' if flag in accepted else 'refuses'} it"
        for flag, status in rows().items()
        if (status in ACCEPTED) != (flag in accepted)
    ]
    assert not wrong, "update docs/reference/triton-flags.md:\n" + "\n".join(wrong)


def test_the_rows_are_tritons_flags() -> None:
    table = rows()
    assert len(table) == 87  # Triton 2.51's --help lists 87 flags, --help included
    binary = reference_home() / "wheel" / "pytriton" / "tritonserver" / "bin" / "tritonserver"
    if not binary.is_file():
        pytest.skip("reference Triton is not installed")
    libs = reference_home() / "wheel" / "nvidia_pytriton.libs"
    env = {**os.environ, "LD_LIBRARY_PATH": f"{libs}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    run = subprocess.run(
        [str(binary), "--help"], capture_output=True, text=True, env=env, timeout=60
    )
    triton = set(re.findall(r"^  (--[a-z0-9-]+)", run.stdout + run.stderr, re.MULTILINE))
    assert triton == set(table)
