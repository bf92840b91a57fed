"""``--model-namespacing``: two repositories holding models of the same names (Triton's
L0_model_namespacing), through the real server and tritonclient, and against the reference
Triton 2.51 on the same repositories with the same flags.

With namespacing both copies load and the index lists both; a request by a name several loaded
models share gets Triton's ambiguity answer; ensembles call the copy in their own repository;
load and unload by name act in every repository; poll mode follows a copy that goes and comes
back. Without it, a name in two repositories is not available and neither are the ensembles
that call it.
"""

from __future__ import annotations

import http.client
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import Serving
from tests.core.namespace_repos import ADD, INPUT0, INPUT1, SUB, ambiguous, make_repositories
from tests.helpers import MODES, grpc_input, http_input, wait_until
from tests.reference import ReferenceServer, reference_available, start_reference
from tests.serverproc import ServerProcess, refused_start

NAMES = ("simple_addsub", "simple_subadd", "composing_model", "simple_ensemble", "bls_addsub",
         "nosuch")  # fmt: skip
BLS_NOT_READY = (
    "Model composing_model - Error when running inference: Failed for execute the inference "
    "request. Model 'composing_model' is not ready."
)
reference = pytest.mark.skipif(
    not reference_available(), reason="reference Triton is not installed"
)


class Endpoints(Protocol):
    @property
    def http_url(self) -> str: ...
    @property
    def grpc_url(self) -> str: ...
    @property
    def metrics_url(self) -> str: ...


# ------------------------------------------------------------------ observing a server


def _raw(url: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    host, port = url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body))
        resp = conn.getresponse()
        text = resp.read().decode()
        return resp.status, json.loads(text) if text else None
    finally:
        conn.close()


def index(server: Endpoints) -> Any:
    return _raw(server.http_url, "POST", "/v2/repository/index", {})[1]


def control(server: Endpoints, action: str, model: str, **params: Any) -> tuple[int, Any]:
    body = {"parameters": params} if params else {}
    return _raw(server.http_url, "POST", f"/v2/repository/models/{model}/{action}", body)


def infer_http(server: Endpoints, model: str) -> tuple[Any, ...]:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        res = client.infer(model, [http_input("INPUT0", INPUT0), http_input("INPUT1", INPUT1)])
    except InferenceServerException as e:
        return ("error", e.status(), e.message())
    return ("ok", res.as_numpy("OUTPUT0").tolist())


def infer_grpc(server: Endpoints, model: str) -> tuple[Any, ...]:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        try:
            res = client.infer(model, [grpc_input("INPUT0", INPUT0), grpc_input("INPUT1", INPUT1)])
        except InferenceServerException as e:
            return ("error", e.status(), e.message())
    return ("ok", res.as_numpy("OUTPUT0").tolist())


def _step_namespaces(config: Any) -> list[str]:
    return [s["model_namespace"] for s in config.get("ensemble_scheduling", {}).get("step", [])]


def observe_model(server: Endpoints, model: str) -> dict[str, Any]:
    """What a client sees of ``model``: inference over both protocols, metadata, readiness,
    the config's step namespaces, statistics' errors."""
    seen: dict[str, Any] = {"http": infer_http(server, model), "grpc": infer_grpc(server, model)}
    url = server.http_url
    status, body = _raw(url, "GET", f"/v2/models/{model}")
    seen["metadata"] = (status, body)
    seen["ready"] = _raw(url, "GET", f"/v2/models/{model}/ready")
    status, body = _raw(url, "GET", f"/v2/models/{model}/config")
    seen["config"] = (status, _step_namespaces(body) if status == 200 else body)
    status, body = _raw(url, "GET", f"/v2/models/{model}/stats")
    seen["stats"] = (status, None if status == 200 else body)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        seen["grpc ready"] = client.is_model_ready(model)
    return seen


def metric_series(server: Endpoints) -> list[str]:
    """The label sets of ``nv_inference_count`` (model, namespace with namespacing)."""
    host, port = server.metrics_url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    lines = text.splitlines()
    return sorted(line.split(" ")[0] for line in lines if line.startswith("nv_inference_count{"))


def observe(server: Endpoints) -> dict[str, Any]:
    return {
        "index": index(server),
        **{name: observe_model(server, name) for name in NAMES},
        "metrics": metric_series(server),
    }


# ------------------------------------------------------------------ servers


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_repositories(tmp_path_factory.mktemp("namespaces"))


@pytest.fixture(scope="module", params=MODES)
def namespaced(
    request: pytest.FixtureRequest, serving: Serving, repos: tuple[Path, Path]
) -> Iterator[ServerProcess]:
    with serving.server(list(repos), "--model-namespacing=true", mode=request.param) as srv:
        yield srv


def _ok(outputs: list[int]) -> tuple[Any, ...]:
    return ("ok", outputs)


# ------------------------------------------------------------------ with namespacing


def test_both_copies_load_and_the_index_lists_each(
    namespaced: ServerProcess, repos: tuple[Path, Path]
) -> None:
    ready = [("addsub", n) for n in ("bls_addsub", "composing_model", "simple_addsub",
             "simple_ensemble")] + [("subadd", n) for n in ("composing_model", "simple_ensemble",
             "simple_subadd")]  # fmt: skip
    # repository by repository (Triton orders models by namespace, then name)
    assert index(namespaced) == [
        {"name": name, "version": "1", "state": "READY"} for _, name in ready
    ]
    namespace = {"addsub": repos[0], "subadd": repos[1]}
    series = [f'nv_inference_count{{model="{name}",namespace="{namespace[repo]}",version="1"}}'
              for repo, name in ready]  # fmt: skip
    assert metric_series(namespaced) == sorted(series)


def test_ensembles_call_the_copy_in_their_own_repository(
    namespaced: ServerProcess, repos: tuple[Path, Path]
) -> None:
    for infer in (infer_http, infer_grpc):
        assert infer(namespaced, "simple_addsub") == _ok(ADD)
        assert infer(namespaced, "simple_subadd") == _ok(SUB)
    client = httpclient.InferenceServerClient(namespaced.http_url)
    for model, repo in (("simple_addsub", repos[0]), ("simple_subadd", repos[1])):
        assert _step_namespaces(client.get_model_config(model)) == [str(repo)]


def test_a_shared_name_is_ambiguous(namespaced: ServerProcess) -> None:
    for name in ("composing_model", "simple_ensemble"):
        seen = observe_model(namespaced, name)
        assert seen["http"] == ("error", "400", ambiguous(name))
        assert seen["grpc"] == ("error", "StatusCode.INVALID_ARGUMENT", ambiguous(name))
        assert seen["metadata"] == seen["config"] == (400, {"error": ambiguous(name)})
        assert seen["ready"] == (400, {"error": "Model version not ready"})
        assert seen["stats"] == (400, {"error": f"requested model '{name}' is not available"})
        assert seen["grpc ready"] is False
    unknown = "Request for unknown model: 'nosuch' is not found"
    assert infer_http(namespaced, "nosuch") == ("error", "400", unknown)  # (404 without)
    assert infer_grpc(namespaced, "nosuch") == ("error", "StatusCode.INVALID_ARGUMENT", unknown)


def test_a_bls_call_by_a_shared_name_is_not_ready(namespaced: ServerProcess) -> None:
    assert infer_http(namespaced, "bls_addsub") == ("error", "500", BLS_NOT_READY)


def test_statistics_of_every_model_list_both_copies(namespaced: ServerProcess) -> None:
    # Beyond Triton 2.51, whose all-models statistics fail with namespacing on.
    stats = httpclient.InferenceServerClient(namespaced.http_url).get_inference_statistics()
    names = [s["name"] for s in stats["model_stats"]]
    assert names.count("composing_model") == 2 and names.count("simple_ensemble") == 2


def test_a_bad_flag_value_names_the_flag(repos: tuple[Path, Path]) -> None:
    err = refused_start(repos[0], "--model-namespacing=maybe")
    assert err.splitlines()[-1] == (
        "modelyard serve: error: argument --model-namespacing: expected true or false, got 'maybe'"
    )


def test_explicit_mode_loads_and_unloads_a_name_in_every_repository(
    serving: Serving, repos: tuple[Path, Path]
) -> None:
    flags = ("--model-namespacing=true", "--model-control-mode=explicit")
    with serving.server(list(repos), *flags) as server:
        unknown = ("error", "400", "Request for unknown model: 'composing_model' is not found")
        assert infer_http(server, "composing_model") == unknown
        # loading an ensemble loads its step's model in every repository (Triton polls by name)
        assert control(server, "load", "simple_addsub") == (200, None)
        assert _states(server, "composing_model") == ["READY", "READY"]
        assert infer_http(server, "simple_addsub") == _ok(ADD)
        assert infer_http(server, "composing_model") == (
            "error",
            "400",
            ambiguous("composing_model"),
        )
        assert control(server, "unload", "composing_model") == (200, None)
        wait_until(lambda: _states(server, "composing_model") == ["UNAVAILABLE"] * 2)
        gone = "Identifier of model 'composing_model' is not found in global map"
        assert infer_http(server, "composing_model") == ("error", "404", gone)
        assert control(server, "load", "simple_ensemble") == (200, None)
        assert _states(server, "simple_ensemble") == ["READY", "READY"]
        assert infer_http(server, "simple_ensemble") == (
            "error",
            "400",
            ambiguous("simple_ensemble"),
        )


def _states(server: Endpoints, name: str) -> list[str]:
    return [m.get("state", "") for m in index(server) if m["name"] == name]


def test_poll_mode_follows_a_copy_that_goes_and_comes_back(
    serving: Serving, tmp_path: Path
) -> None:
    addsub, subadd = make_repositories(tmp_path)
    flags = ("--model-namespacing=true", "--model-control-mode=poll", "--repository-poll-secs=0.5")
    env = {"PYTHONDONTWRITEBYTECODE": "1"}
    with serving.server([addsub, subadd], *flags, env=env) as server:
        parked = tmp_path / "composing_model"
        shutil.move(addsub / "composing_model", parked)
        # the ensemble in addsub calls the only copy left, subadd's
        wait_until(lambda: infer_http(server, "simple_addsub") == _ok(SUB), timeout=60)
        assert infer_http(server, "composing_model") == _ok(SUB)
        shutil.move(parked, addsub / "composing_model")
        wait_until(lambda: infer_http(server, "simple_addsub") == _ok(ADD), timeout=60)
        assert infer_http(server, "simple_subadd") == _ok(SUB)
        wait_until(lambda: infer_http(server, "composing_model")[1] == "400", timeout=60)


# ------------------------------------------------------------------ without namespacing


def test_without_namespacing_a_shared_name_is_unavailable(
    serving: Serving, repos: tuple[Path, Path]
) -> None:
    with serving.server(list(repos), "--strict-readiness=false") as server:
        duplicate = {"state": "UNAVAILABLE", "reason": "model appears in two or more repositories"}
        assert index(server) == [
            {"name": "bls_addsub", "version": "1", "state": "READY"},
            {"name": "composing_model", **duplicate},
            {"name": "simple_addsub"},  # its step model is not available: never loaded
            {"name": "simple_ensemble", **duplicate},
            {"name": "simple_subadd"},
        ]
        for name in ("composing_model", "simple_addsub"):
            unknown = f"Request for unknown model: '{name}' is not found"
            assert infer_http(server, name) == ("error", "404", unknown)
        assert infer_http(server, "bls_addsub") == ("error", "500", BLS_NOT_READY)


def test_without_namespacing_serve_exits_on_a_shared_name(repos: tuple[Path, Path]) -> None:
    err = refused_start(repos[0], "--model-repository", str(repos[1]), *_free_ports())
    assert err.splitlines()[-1] == "error: creating server: Internal - failed to load all models"


def _free_ports() -> tuple[str, ...]:
    return ("--http-port=0", "--grpc-port=0", "--metrics-port=0")


# ------------------------------------------------------------------ against the reference


@pytest.fixture(scope="module")
def reference_namespaced(repos: tuple[Path, Path]) -> Iterator[ReferenceServer]:
    ref = start_reference(repos[0], "--model-namespacing=true", f"--model-repository={repos[1]}")
    try:
        yield ref
    finally:
        ref.stop()


@pytest.mark.reference
@reference
def test_namespacing_matches_the_reference(
    namespaced: ServerProcess, reference_namespaced: ReferenceServer
) -> None:
    assert observe(namespaced) == observe(reference_namespaced)


@pytest.mark.reference
@reference
def test_without_namespacing_matches_the_reference(
    serving: Serving, repos: tuple[Path, Path]
) -> None:
    flags = ("--strict-readiness=false", "--exit-on-error=false")
    ref = start_reference(repos[0], f"--model-repository={repos[1]}", *flags)
    try:
        expected = observe(ref)
    finally:
        ref.stop()
    with serving.server(list(repos), *flags) as server:
        assert observe(server) == expected


@pytest.mark.reference
@reference
def test_explicit_mode_matches_the_reference(serving: Serving, repos: tuple[Path, Path]) -> None:
    flags = ("--model-namespacing=true", "--model-control-mode=explicit")

    def steps(server: Endpoints) -> list[Any]:
        seen: list[Any] = [index(server), infer_http(server, "composing_model")]
        seen += [control(server, "load", "simple_addsub"), index(server)]
        seen += [infer_http(server, m) for m in ("simple_addsub", "composing_model")]
        seen.append(control(server, "unload", "composing_model"))
        wait_until(lambda: "UNLOADING" not in _states(server, "composing_model"))
        seen += [_states(server, "composing_model"), infer_http(server, "composing_model")]
        seen += [control(server, "load", "simple_ensemble"), _states(server, "simple_ensemble")]
        seen += [infer_http(server, m) for m in ("simple_ensemble", "composing_model")]
        return seen

    ref = start_reference(repos[0], f"--model-repository={repos[1]}", *flags)
    try:
        expected = steps(ref)
    finally:
        ref.stop()
    with serving.server(list(repos), *flags) as server:
        assert steps(server) == expected
