"""Differential test of restricted APIs and protocols: modelyard and the reference Triton 2.51
run with the same flags (every group restricted with its own header) on the same model, and
answer the same calls alike: every HTTP endpoint's refusal (status, content type, body), every
gRPC method's refusal (code, details) including grpc.health.v1, that each is open with its
header, and the start-up errors for bad flag values. Skipped without the reference."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from modelyard.frontends.grpc.access import METHOD_GROUPS
from modelyard.frontends.restricted import GROUPS
from tests.conftest import Serving
from tests.frontends.test_restricted import (
    BAD_VALUES,
    HTTP_ENDPOINTS,
    _metadata,
    grpc_unary,
    header,
    http_call,
    restrict_each_group,
)
from tests.reference import reference_available, reference_script, start_reference
from tests.serverproc import refused_start

pytestmark = [
    pytest.mark.reference,
    pytest.mark.skipif(not reference_available(), reason="reference Triton is not installed"),
    pytest.mark.timeout(600),
]

FLAGS = (
    *restrict_each_group("http-restricted-api"),
    *restrict_each_group("grpc-restricted-protocol"),
)
ENDPOINTS = [(m, p) for endpoints in HTTP_ENDPOINTS.values() for m, p in endpoints]


def _observe(http_url: str, grpc_url: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    everything = {header(g): f"open-{g}" for g in GROUPS}
    for method, path in ENDPOINTS:
        seen[f"{method} {path}"] = http_call(http_url, method, path, {})
        status = http_call(http_url, method, path, everything)[0]
        seen[f"{method} {path} open"] = status != 403
    with grpc.insecure_channel(grpc_url) as channel:
        for method, group in METHOD_GROUPS.items():
            seen[method] = grpc_unary(channel, method, ())
            _, details = grpc_unary(channel, method, _metadata(group))
            seen[f"{method} open"] = "restricted" not in details
    return seen


@pytest.fixture(scope="module")
def observations(serving: Serving) -> Iterator[tuple[Any, Any]]:
    repo = serving.repo(["http_gate"], copy=True)
    args = ("--model-control-mode=explicit", "--load-model=http_gate", *FLAGS)
    ref = start_reference(repo, *args, timeout=120, ready_headers={header("health"): "open-health"})
    try:
        theirs = _observe(ref.http_url, ref.grpc_url)
    finally:
        ref.stop()
    with serving.server(repo, *args, endpoints=("http", "grpc")) as mine:
        ours = _observe(mine.http_url, mine.grpc_url)
    yield theirs, ours


KEYS = [
    *(k for m, p in ENDPOINTS for k in (f"{m} {p}", f"{m} {p} open")),
    *(k for m in METHOD_GROUPS for k in (m, f"{m} open")),
]


@pytest.mark.parametrize("key", KEYS)
def test_matches_reference(observations: tuple[dict[str, Any], dict[str, Any]], key: str) -> None:
    theirs, ours = observations
    assert ours[key] == theirs[key]


def _reference_start_error(repo: Path, *args: str) -> list[str]:
    script = reference_script()
    assert script is not None
    proc = subprocess.run(
        [str(script), "serve", str(repo), *args], capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 1
    return [line.strip() for line in (proc.stdout + proc.stderr).strip().splitlines()[-2:]]


@pytest.mark.parametrize(
    "args",
    [
        *([f"--http-restricted-api={value}"] for value, _ in BAD_VALUES[::2]),
        ["--grpc-restricted-protocol=foo:a=b"],
        ["--grpc-restricted-protocol=health:a=b", "--grpc-restricted-protocol=health:c=d"],
    ],
)
def test_start_up_errors_match_reference(tmp_path: Path, args: list[str]) -> None:
    theirs = _reference_start_error(tmp_path, *args)
    ours = [line.strip() for line in refused_start(tmp_path, *args).strip().splitlines()[-2:]]
    assert ours == theirs  # 'Bad option: "--<flag>".' and the message (after Triton's usage)
