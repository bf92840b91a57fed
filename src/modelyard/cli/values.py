"""The value types every flag module shares: Triton's booleans, counts, and a BOOL flag."""

from __future__ import annotations

import argparse


def parse_bool(value: str | bool) -> bool:
    """Triton's boolean option values (any case), and yes/no, on/off."""
    if isinstance(value, bool):
        return value
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{value}'")


def positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{value}'")
    return n


def count(value: str) -> int:
    """A whole number, 0 included."""
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{value}'")
    return n


def add_bool_flag(p: argparse.ArgumentParser, name: str, default: bool, help: str) -> None:
    """``--name`` alone is true; ``--name=false`` (or ``--name false``) is not."""
    p.add_argument(
        name,
        type=parse_bool,
        nargs="?",
        const=True,
        default=default,
        metavar="BOOL",
        help=f"{help} (default: {str(default).lower()})",
    )
