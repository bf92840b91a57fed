"""Differential test: the reference Triton 2.51 and modelyard's config code read the same model
folders; the /config bodies, the metadata and the load errors must agree.

Skipped when the reference is not installed (``shared/reference/triton install``).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelyard.config import (
    available_versions,
    config_to_json,
    load_config_file,
    model_metadata,
    normalize_config,
    select_versions,
    validate_config,
)
from modelyard.errors import ConfigError
from tests.reference import ReferenceServer, reference_available, start_reference

TRITONSERVER = (
    Path.home() / ".cache" / "modelyard-reference" / "wheel" / "pytriton" / "tritonserver" / "bin"
    / "tritonserver"
)  # fmt: skip

pytestmark = [
    pytest.mark.reference,
    pytest.mark.skipif(
        not (TRITONSERVER.exists() and reference_available()),
        reason="reference Triton is not installed",
    ),
]

MODEL_PY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([]) for _ in requests]
"""
IO = (
    'input [{name: "IN" data_type: TYPE_FP32 dims: [4]}]\n'
    'output [{name: "OUT" data_type: TYPE_FP32 dims: [4]}]\n'
)
# name -> (config.pbtxt or None, version directories)
GOOD: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "batched": ('backend: "python"\nmax_batch_size: 8\n' + IO + """
dynamic_batching {
  preferred_batch_size: [ 2, 4 ]
  max_queue_delay_microseconds: 100
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5000000 }
}
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "foo" value: { string_value: "bar" } }
""", ("1",)),
    "sequence": ('name: "sequence"\nbackend: "python"\nmax_batch_size: 4\n' + IO + """
sequence_batching {
  oldest { max_candidate_sequences: 2 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [{ input_name: "S_IN" output_name: "S_OUT" data_type: TYPE_INT32 dims: [ -1 ]
           initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" } }]
}
""", ("1",)),
    "direct": ('backend: "python"\nmax_batch_size: 2\n' + IO + """
sequence_batching { direct { minimum_slot_utilization: 0.25 } max_sequence_idle_microseconds: 7 }
""", ("1",)),
    "decoupled": ('backend: "python"\n' + IO + "model_transaction_policy { decoupled: True }\n"
                  'instance_group [{ kind: KIND_AUTO }, { name: "extra" count: 2 }]\n', ("1",)),
    "params": ('backend: "python"\n' + IO + 'parameters: { key: "threshold" value: '
               '{ string_value: "0.5 \\"quoted\\" \\u00e9" } }\n'
               'metric_tags { key: "team" value: "x" }\n', ("1",)),
    "latest2": ('backend: "python"\n' + IO + "version_policy { latest { num_versions: 2 } }\n",
                ("1", "2", "3", "007", "notes")),
    "all_versions": ('backend: "python"\n' + IO + "version_policy: { all { } }\n", ("1", "4")),
    "specific": ('backend: "python"\n' + IO + "version_policy { specific { versions: [1, 3, 9] } }\n",
                 ("1", "2", "3")),
    "no_config": (None, ("1",)),
    "found_by_file": (IO + "max_batch_size: 1\ndynamic_batching { }\n", ("1",)),
}  # fmt: skip
BAD: dict[str, str] = {
    "bad_mismatch": 'name: "other"\nbackend: "python"\n' + IO,
    "bad_gpu": 'backend: "python"\n' + IO + "instance_group [{ kind: KIND_GPU }]\n",
    "bad_dims": 'backend: "python"\ninput [{name: "IN" data_type: TYPE_FP32 dims: [0]}]\n',
    "bad_pref": 'backend: "python"\nmax_batch_size: 2\n' + IO
    + "dynamic_batching { preferred_batch_size: [4] }\n",
    "bad_corrid": 'backend: "python"\n' + IO + 'sequence_batching { control_input [{ name: "C" '
    "control [{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 }] }] }\n",
    "bad_specific": 'backend: "python"\n' + IO + "version_policy { specific { versions: [5] } }\n",
}  # fmt: skip


def write_model(repo: Path, name: str, config: str | None, versions: tuple[str, ...]) -> None:
    d = repo / name
    d.mkdir(parents=True)
    if config is not None:
        (d / "config.pbtxt").write_text(config)
    for v in versions:
        (d / v).mkdir()
        (d / v / "model.py").write_text(MODEL_PY)


def get(server: ReferenceServer, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
    host, port = server.http_url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.request(method, path, body=body or None)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def ours(repo: Path, name: str) -> tuple[ModelConfig, list[int]]:
    d = repo / name
    path = d / "config.pbtxt"
    cfg = load_config_file(path) if path.exists() else ModelConfig()
    cfg = normalize_config(cfg, name, model_dir=d)
    validate_config(cfg)
    return cfg, select_versions(cfg, available_versions(d))


@pytest.fixture(scope="module")
def reference(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, ReferenceServer]]:
    repo = tmp_path_factory.mktemp("config_ref") / "models"
    for name, (config, versions) in GOOD.items():
        write_model(repo, name, config, versions)
    for name, config in BAD.items():
        write_model(repo, name, config, ("1",))
    server = start_reference(repo, "--model-control-mode=explicit", "--strict-readiness=false")
    try:
        yield repo, server
    finally:
        server.stop()


@pytest.mark.parametrize("name", sorted(GOOD))
def test_config_and_metadata_match_triton(
    reference: tuple[Path, ReferenceServer], name: str
) -> None:
    repo, server = reference
    status, body = get(server, "POST", f"/v2/repository/models/{name}/load", b"{}")
    assert status == 200, body
    _, triton_config = get(server, "GET", f"/v2/models/{name}/config")
    _, triton_meta = get(server, "GET", f"/v2/models/{name}")
    cfg, versions = ours(repo, name)
    assert config_to_json(cfg) == triton_config.decode()
    meta = model_metadata(cfg, [str(v) for v in versions])
    assert meta == json.loads(triton_meta)


@pytest.mark.parametrize("name", sorted(BAD))
def test_load_errors_match_triton(reference: tuple[Path, ReferenceServer], name: str) -> None:
    repo, server = reference
    status, body = get(server, "POST", f"/v2/repository/models/{name}/load", b"{}")
    assert status != 200
    with pytest.raises(ConfigError) as info:
        ours(repo, name)
    # Triton puts the reason in the response, or (for errors found while reading the
    # repository) only in its log.
    assert info.value.message in body.decode() + server.output()
