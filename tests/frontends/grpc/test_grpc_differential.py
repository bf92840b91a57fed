"""Differential tests of the gRPC frontend: modelyard and the reference Triton 2.51 serve the
same copy of the grpc_* test models; the same gRPC calls (tritonclient, and raw protobuf
requests tritonclient cannot build) must get the same answers, statuses and messages.
Skipped when the reference is not installed (``shared/reference/triton install``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import Serving
from tests.frontends.grpc import grpc_probes
from tests.reference import reference_available, start_reference

pytestmark = [
    pytest.mark.reference,
    pytest.mark.skipif(not reference_available(), reason="reference Triton is not installed"),
]

MODELS = ("grpc_identity_all", "grpc_decoupled", "grpc_slow", "grpc_raise")
REFERENCE_STARTS = 3

# Known differences (key -> why); everything else must match. Not probed at all: CUDA
# shared-memory registration (both answer INVALID_ARGUMENT, with different texts: modelyard
# gives Triton's CPU-build text, the reference a GPU build's).
DIFFERENT: dict[str, str] = {
    "extra_raw": "modelyard refuses more raw_input_contents than inputs that take them (issue "
    "14: a client bug made visible); Triton 2.51 ignores the extra buffers",
}


@pytest.fixture(scope="module")
def observations(serving: Serving) -> Iterator[tuple[Any, Any]]:
    repo = serving.repo(MODELS, copy=True)
    args = ("--model-control-mode=explicit", *(f"--load-model={m}" for m in MODELS))
    ref_observed = _observe_reference(repo, args)
    with serving.server(repo, *args) as mine:
        yield ref_observed, _observe(mine.grpc_url)


def _observe_reference(repo: Any, args: tuple[str, ...]) -> dict[str, Any]:
    """The reference's observations. Triton 2.51 now and then aborts on a stream probe (an
    assertion in its gRPC response writer, in its log): then it is started again and the
    probes it could not answer are made on the new one."""
    observed: dict[str, Any] = {}
    for _ in range(REFERENCE_STARTS):
        ref = start_reference(repo, *args, timeout=120)
        try:
            fresh = _observe(ref.grpc_url, attempts=5, alive=ref.running)
        finally:
            ref.stop()
        observed.update({k: v for k, v in fresh.items() if k not in observed or _lost(observed[k])})
        if not any(_lost(v) for v in observed.values()):
            break
    return observed


def _lost(observation: Any) -> bool:
    """No answer: a connection the port refused, or a stream probe that failed or whose
    stream the server's exit cut (UNAVAILABLE: "Stream removed", "failed to connect"; no
    probe is answered UNAVAILABLE by a live server)."""
    if observation and isinstance(observation[0], list):  # a stream probe's responses
        return observation[0][:1] == ["probe failed"] or any(
            r[:2] == ["err", "StatusCode.UNAVAILABLE"] for r in observation
        )
    return grpc_probes.unreachable(observation)


def _observe(
    url: str, attempts: int = 1, alive: grpc_probes.Alive = lambda: True
) -> dict[str, Any]:
    streams = grpc_probes.stream_probes(url, attempts)
    return {
        **grpc_probes.client_probes(url, alive),
        **grpc_probes.raw_probes(url, alive),
        **{f"stream_{k}": v for k, v in streams.items()},
    }


def test_same_probes(observations: tuple[dict[str, Any], dict[str, Any]]) -> None:
    ref, mine = observations
    assert set(ref) == set(mine)


def _keys() -> list[str]:
    return [
        *["ready_unknown", "ready_bad_version", "ready_negative_version", "ready_version_digits_then_text", "metadata_bad_version", "statistics_bad_version", "statistics_unknown", "infer_decoupled", "log_settings", "log_bad_type", "log_file", "trace_settings", "trace_model", "trace_update", "trace_clear", "trace_unknown_model", "trace_file", "shm_status", "shm_status_unknown", "shm_unregister_unknown", "cuda_status", "cuda_status_unknown", "cuda_unregister_unknown", "index_ready", "unload_unknown"],
        *["typed_int8", "typed_uint16", "typed_bool", "typed_bytes", "typed_wrong_field", "typed_fp16", "typed_count", "typed_with_raw", "no_data", "extra_raw", "reserved_param", "uint64_custom_param", "sequence_id_uint64", "priority_negative", "timeout_wrong_type", "empty_final_wrong_type", "headers_param", "version_digits_then_text", "load_unrecognized_param", "load_config_wrong_type", "load_repository_name", "index_repository_name", "unload_wrong_type"],
        *(f"stream_{k}" for k in ["decoupled", "decoupled_empty_final", "decoupled_zero", "decoupled_zero_empty_final_version", "non_decoupled", "non_decoupled_empty_final", "errors", "grpc_error_mode_unknown_model", "grpc_error_mode_model_error", "order", "bad_version"]),
    ]  # fmt: skip


@pytest.mark.parametrize("key", _keys())
def test_matches_reference(observations: tuple[dict[str, Any], dict[str, Any]], key: str) -> None:
    ref, mine = observations
    if key in DIFFERENT:
        pytest.xfail(DIFFERENT[key])
    assert mine[key] == ref[key]
