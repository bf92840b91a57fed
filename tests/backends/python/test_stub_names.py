"""Model names with shell metacharacters are refused as Triton 25.09 refuses them ("Invalid
stub name: contains invalid characters"), in both execution modes.

Sources (no reference of those releases here): python_backend r26.06 ``src/pb_utils.h``
``INVALID_CHARS`` and ``src/stub_launcher.cc`` (INVALID_ARG); core r26.06
``src/model_repository_manager/model_repository_manager.cc`` ``ValidateModelName``, which
refuses only empty names, ".." and "/" before that, so "model\\test" reaches the backend's
check over gRPC too; server r26.06 ``qa/L0_backend_python/model_control/model_control_test.py``
``test_invalid_character_model_names``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from modelyard.backends.python.server.backend import check_stub_name
from modelyard.errors import ErrorCode, VersionLoadError
from tests.conftest import Serving
from tests.core.modelfiles import config_json, model_source, write_model
from tests.helpers import MODES
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(90)

INVALID = ";|&$`<>()[]{}\\\"'*?~#!"  # python_backend's INVALID_CHARS
TEXT = "Invalid stub name: contains invalid characters"


@pytest.mark.parametrize("char", list(INVALID))
def test_each_invalid_character_is_refused(char: str) -> None:
    with pytest.raises(VersionLoadError) as e:
        check_stub_name(f"model{char}test", 1)
    assert e.value.code == ErrorCode.INVALID_ARG
    assert e.value.message == f"version 1 is at UNAVAILABLE state: Invalid argument: {TEXT};\n"


def test_ordinary_names_pass() -> None:
    for name in ("TestModel123", "model-with-hyphens", "model_with_underscores", "m.v2", "a b"):
        check_stub_name(name, 1)


@pytest.fixture(scope="module", params=MODES)
def served(request: pytest.FixtureRequest, serving: Serving) -> Iterator[ServerProcess]:
    repo = serving.repo()
    write_model(repo, "in(repo)")
    with serving.server(repo, "--model-control-mode=explicit", "--load-model=*",
                        mode=request.param) as server:  # fmt: skip
        yield server


# "model\\test": Triton 26.x's core lets a backslash through (ValidateModelName refuses only
# "/" and ".."), so the Python backend's text answers, as for the other characters.
@pytest.mark.parametrize(
    "name", ["model$test", "model;test", "model'test'", "model*test", "model\\test", "m?t#x"]
)
def test_loads_are_refused_over_http_and_grpc(served: ServerProcess, name: str) -> None:
    files = {"file:1/model.py": model_source().encode()}
    expected = (
        f"load failed for model '{name}': version 1 is at UNAVAILABLE state: "
        f"Invalid argument: {TEXT};\n"
    )
    http = httpclient.InferenceServerClient(served.http_url)
    with pytest.raises(InferenceServerException) as e:
        http.load_model(name, config=config_json(name), files=files)
    assert (e.value.status(), e.value.message()) == ("400", expected)
    with grpcclient.InferenceServerClient(served.grpc_url) as grpc:
        with pytest.raises(InferenceServerException) as e:
            grpc.load_model(name, config=config_json(name), files=files)
        assert (e.value.status(), e.value.message()) == ("StatusCode.INVALID_ARGUMENT", expected)
    assert not http.is_model_ready(name)
    http.load_model("good-name", config=config_json("good-name"), files=files)
    assert http.is_model_ready("good-name")


def test_a_repository_folder_with_such_a_name_does_not_load(served: ServerProcess) -> None:
    index = httpclient.InferenceServerClient(served.http_url).get_model_repository_index()
    (entry,) = [m for m in index if m["name"] == "in(repo)"]
    assert entry["state"] == "UNAVAILABLE"
    assert entry["reason"] == f"Invalid argument: {TEXT}"
