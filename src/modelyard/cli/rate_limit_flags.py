"""The rate limiter's serve flags, as Triton 2.51 parses them: ``--rate-limit`` (case-insensitive,
default off) and the repeatable ``--rate-limit-resource=NAME:COUNT[:DEVICE]`` (Triton's texts
for a malformed value; ``std::stoi``'s leniency: leading blanks, a sign, what follows the digits
ignored)."""

from __future__ import annotations

import argparse

from modelyard.scheduling.rate_limiter import MODES, PER_DEVICE

_INT32 = (-(2**31), 2**31 - 1)


def _mode(value: str) -> str:
    mode = value.lower()
    if mode not in MODES:
        raise argparse.ArgumentTypeError(f"expected execution_count or off, got '{value}'")
    return mode


def _stoi(text: str) -> int:
    stripped = text.lstrip()
    end = 1 if stripped[:1] in ("+", "-") else 0
    while end < len(stripped) and stripped[end].isdigit():
        end += 1
    digits = stripped[:end]
    if not digits.lstrip("+-"):
        raise argparse.ArgumentTypeError(f"Invalid option value. Got {text}")
    value = int(digits)
    if not _INT32[0] <= value <= _INT32[1]:
        raise argparse.ArgumentTypeError(f"Provided option value is out of bound. Got {text}")
    return value


def resource(value: str) -> tuple[str, int, int]:
    """``NAME:COUNT[:DEVICE]`` -> (name, count, device); no device: every device
    (``PER_DEVICE``). The name is kept as given (Triton's help says case-insensitive; its
    parser is not)."""
    parts = value.split(":")
    if not 2 <= len(parts) <= 3:
        raise argparse.ArgumentTypeError(
            "--rate-limit-resource option format is '<resource_name>:<count>:<device>' or "
            f"'<resource_name>:<count>'. Got {value}"
        )
    count = _stoi(parts[1])
    device = _stoi(parts[2]) if len(parts) == 3 else PER_DEVICE
    return parts[0], count, device


def add_rate_limit_flags(s: argparse.ArgumentParser) -> None:
    group = s.add_argument_group(
        "rate limiter",
        "Triton's rate limiter: which model instance runs next when instances share "
        "resources (instance_group { rate_limiter { resources [...] priority } })",
    )
    group.add_argument(
        "--rate-limit",
        type=_mode,
        default="off",
        metavar="MODE",
        help="execution_count: an instance runs once the resources its group's rate_limiter "
        "asks for are free, instances taking turns by priority and executions so far; off: "
        "rate_limiter configs are ignored and a request runs as soon as an instance is free",
    )
    group.add_argument(
        "--rate-limit-resource",
        type=resource,
        action="append",
        default=[],
        metavar="NAME:COUNT[:DEVICE]",
        help="how many of resource NAME there are (on DEVICE only, else on every device; a "
        "global resource takes the count whatever the device); repeatable. Without it, each "
        "resource has the most any instance asks for; with it, a resource not named has none",
    )
