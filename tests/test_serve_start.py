"""How ``modelyard serve`` starts and stops: the endpoints listen first (live, not ready while
models load), a line per model loading and loaded with its time, a model's syntax or import
error at its file and line with the source line (log, repository index, load API; Triton's
text first, checked against the reference), one clear line for a missing repository or a
taken port before any model loads, ``--version``, ``--help`` with each default once, and a
final "stopped" line."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from modelyard.testing import ServerProcess, refused_start, start_server
from tests.helpers import EXAMPLES, MODES, final_output, mode_args
from tests.reference import reference_available, start_reference

pytestmark = pytest.mark.timeout(180)

_LINE = re.compile(r"^[IWE]\d{4} [\d:.]+ \d+ [\w.]+:\d+\] (\".*\")$")
_FAILED_LOAD = "load failed for model '{name}': version 1 is at UNAVAILABLE state: "


def messages(output: str) -> list[str]:
    """The messages of the server's log lines, decoded."""
    return [json.loads(m.group(1)) for line in output.splitlines() if (m := _LINE.match(line))]


def broken_repo(root: Path) -> Path:
    """add_sub, and two copies of it: one with a syntax error, one importing a missing module."""
    root.mkdir(parents=True)
    for name in ("add_sub", "bad_syntax", "bad_import"):
        target = root / name
        shutil.copytree(EXAMPLES / "add_sub", target, ignore=shutil.ignore_patterns("__pycache__"))
        config = target / "config.pbtxt"
        config.write_text(config.read_text().replace('name: "add_sub"', f'name: "{name}"'))
    model_py = root / "bad_syntax" / "1" / "model.py"
    model_py.write_text(
        model_py.read_text().replace("def execute(self, requests):", "def execute(self, requests)")
    )
    model_py = root / "bad_import" / "1" / "model.py"
    model_py.write_text("import json\nimport no_such_module_here\n" + model_py.read_text())
    return root


def syntax_line(repo: Path) -> int:
    lines = (repo / "bad_syntax" / "1" / "model.py").read_text().splitlines()
    return lines.index("    def execute(self, requests)") + 1


@pytest.fixture(scope="module", params=MODES)
def broken(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, Path]]:
    repo = broken_repo(tmp_path_factory.mktemp("broken") / "repo")
    server = start_server(repo, *mode_args(request.param))
    try:
        yield server, repo
    finally:
        server.stop()


def test_a_line_per_model_loading_and_loaded(broken: tuple[ServerProcess, Path]) -> None:
    server, _repo = broken
    lines = messages(server.output())
    started = [i for i, m in enumerate(lines) if m.startswith("Started ")]
    loading = [i for i, m in enumerate(lines) if m.startswith("loading: ")]
    assert len(started) == 3 and max(started) < min(loading)  # the endpoints listen first
    assert {lines[i] for i in loading} == {
        "loading: add_sub",
        "loading: bad_syntax",
        "loading: bad_import",
    }
    assert any(
        re.fullmatch(r"successfully loaded 'add_sub' version 1 in \d+\.\d\d s", m) for m in lines
    )
    done = [m for m in lines if m.startswith("initial model load done")]
    assert len(done) == 1
    assert re.fullmatch(
        r"initial model load done in \d+\.\d\d s: 1 model\(s\) ready, 2 failed "
        r"\(bad_import, bad_syntax\)",
        done[0],
    )


def test_a_syntax_error_points_at_its_line(broken: tuple[ServerProcess, Path]) -> None:
    server, repo = broken
    line = syntax_line(repo)
    model_py = repo / "bad_syntax" / "1" / "model.py"
    reason = (
        f"Internal: SyntaxError: expected ':' (model.py, line {line})\n\nAt:\n"
        f"  {model_py}({line})\n"
        "    def execute(self, requests)\n"
        "                               ^\n"
    )
    assert f"failed to load 'bad_syntax' version 1: {reason}" in messages(server.output())
    index = {
        m["name"]: m
        for m in httpclient.InferenceServerClient(server.http_url).get_model_repository_index()
    }
    assert index["bad_syntax"] == {
        "name": "bad_syntax",
        "version": "1",
        "state": "UNAVAILABLE",
        "reason": reason,
    }


def test_an_import_error_points_at_its_line(broken: tuple[ServerProcess, Path]) -> None:
    server, repo = broken
    model_py = repo / "bad_import" / "1" / "model.py"
    reason = (
        "Internal: ModuleNotFoundError: No module named 'no_such_module_here'\n\nAt:\n"
        f"  {model_py}(2): <module>\n"
        "    import no_such_module_here\n"
    )
    assert f"failed to load 'bad_import' version 1: {reason}" in messages(server.output())
    client = grpcclient.InferenceServerClient(server.grpc_url)
    index = {m.name: m for m in client.get_model_repository_index().models}
    assert (index["bad_import"].state, index["bad_import"].reason) == ("UNAVAILABLE", reason)
    assert "importlib" not in server.output()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_load_api_says_where(protocol: str, tmp_path: Path) -> None:
    repo = broken_repo(tmp_path / "repo")
    line = syntax_line(repo)
    others = [f"--allow-{e}=false" for e in ("http", "grpc", "metrics") if e != protocol]
    with_mode = start_server(repo, "--model-control-mode", "explicit", *others, expect=(protocol,))
    try:
        mod = httpclient if protocol == "http" else grpcclient
        client = mod.InferenceServerClient(getattr(with_mode, f"{protocol}_url"))
        with pytest.raises(InferenceServerException) as e:
            client.load_model("bad_syntax")
        message = e.value.message()
        assert message.startswith(
            _FAILED_LOAD.format(name="bad_syntax")
            + f"Internal: SyntaxError: expected ':' (model.py, line {line})\n\nAt:\n"
        )
        assert f"  {repo / 'bad_syntax' / '1' / 'model.py'}({line})\n" in message
        assert message.endswith("    def execute(self, requests)\n" + " " * 31 + "^\n;\n")
    finally:
        with_mode.stop()


@pytest.mark.reference
@pytest.mark.skipif(not reference_available(), reason="reference Triton is not installed")
def test_the_index_reason_starts_as_tritons(tmp_path: Path) -> None:
    """Clients comparing what Triton writes see it: the model's text comes first, the line and
    source after; only the import machinery's frames are gone."""
    repo = broken_repo(tmp_path / "repo")
    ref = start_reference(repo, "--exit-on-error=false", "--strict-readiness=false")
    try:
        theirs = {
            m["name"]: m
            for m in httpclient.InferenceServerClient(ref.http_url).get_model_repository_index()
        }
    finally:
        ref.stop()
    shutil.rmtree(repo)
    broken_repo(repo)  # a fresh copy: the reference wrote bytecode beside the models
    server = start_server(repo)
    try:
        mine = {
            m["name"]: m
            for m in httpclient.InferenceServerClient(server.http_url).get_model_repository_index()
        }
    finally:
        server.stop()
    for name in ("bad_syntax", "bad_import"):
        assert (mine[name]["state"], mine[name]["version"]) == (
            theirs[name]["state"],
            theirs[name]["version"],
        )
    assert mine["bad_syntax"]["reason"].startswith(theirs["bad_syntax"]["reason"] + "\n\nAt:\n")
    model_frame = theirs["bad_import"]["reason"].split("  <frozen importlib")[0]
    assert model_frame.endswith("model.py(2): <module>\n")
    assert mine["bad_import"]["reason"] == model_frame + "    import no_such_module_here\n"


def _gated_model(repo: Path, gate: Path) -> None:
    """A model whose initialize waits for ``gate`` to exist (two minutes at most)."""
    model = repo / "slow"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        f'parameters {{ key: "gate" value: {{ string_value: "{gate}" }} }}\n'
    )
    (model / "1" / "model.py").write_text(
        "import json, os, time\n"
        "import triton_python_backend_utils as pb_utils\n\n"
        "class TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        '        gate = json.loads(args["model_config"])["parameters"]["gate"]["string_value"]\n'
        "        deadline = time.monotonic() + 120\n"
        "        while not os.path.exists(gate) and time.monotonic() < deadline:\n"
        "            time.sleep(0.01)\n\n"
        "    def execute(self, requests):\n"
        '        return [pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, "IN")]) for r in requests]\n'
    )


@pytest.mark.parametrize("mode", MODES)
def test_live_but_not_ready_while_models_load(mode: str, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    gate = tmp_path / "gate"
    _gated_model(repo, gate)
    shutil.copytree(
        EXAMPLES / "add_sub", repo / "add_sub", ignore=shutil.ignore_patterns("__pycache__")
    )
    server = start_server(repo, *mode_args(mode), wait_for_models=False)
    try:
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        server.wait_for_log("loading: slow")
        assert http.is_server_live() and grpc.is_server_live()
        assert not http.is_server_ready() and not grpc.is_server_ready()
        assert not http.is_model_ready("slow") and not grpc.is_model_ready("slow")
        assert not server.loaded.is_set()
        gate.touch()
        assert server.loaded.wait(60), server.output()
        assert http.is_server_ready() and grpc.is_server_ready()
        assert http.is_model_ready("slow") and grpc.is_model_ready("add_sub")
    finally:
        assert server.stop() == 0
    lines = messages(final_output(server))
    assert lines[-1] == "stopped"
    assert re.search(r"successfully loaded 'slow' version 1 in \d+\.\d\d s", "\n".join(lines))


def test_a_missing_repository_is_one_line(tmp_path: Path) -> None:
    stderr = refused_start(tmp_path / "nowhere")
    assert messages(stderr) == [f"model repository '{tmp_path / 'nowhere'}' does not exist"]
    assert len(stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("endpoint", "service"), [("http", "HTTP service"), ("grpc", "gRPC service")]
)
def test_a_taken_port_is_one_line_before_any_model_loads(
    endpoint: str, service: str, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(
        EXAMPLES / "add_sub", repo / "add_sub", ignore=shutil.ignore_patterns("__pycache__")
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        stderr = refused_start(repo, f"--{endpoint}-port", str(port), f"--{endpoint}-address", "127.0.0.1",
                               *[f"--{e}-port=0" for e in ("http", "grpc", "metrics") if e != endpoint])  # fmt: skip
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert messages(stderr) == [
        f"failed to start a frontend: the {service} cannot listen on 127.0.0.1:{port}: "
        "address already in use"
    ]
    assert "loading" not in stderr and "Traceback" not in stderr


def test_version() -> None:
    import modelyard

    run = subprocess.run(
        [sys.executable, "-m", "modelyard", "--version"], capture_output=True, text=True, timeout=60
    )
    assert (run.returncode, run.stdout) == (0, f"modelyard {modelyard.__version__}\n")


@pytest.mark.parametrize("command", ["serve", "dev"])
def test_help_shows_each_default_once(command: str) -> None:
    run = subprocess.run([sys.executable, "-m", "modelyard", command, "--help"], capture_output=True, text=True, timeout=60,
                         env={"COLUMNS": "100", "PATH": "", "PYTHONPATH": ":".join(sys.path)})  # fmt: skip
    assert run.returncode == 0, run.stderr
    options = re.split(r"\n  (?=-)", run.stdout.split("options:", 1)[1])
    assert len(options) > 30
    for option in options:
        assert option.count("(default") <= 1, option
    text = " ".join(run.stdout.split())
    assert "--http-port HTTP_PORT HTTP port (0 picks a free one) (default: 8000)" in text
    assert "--allow-http [BOOL] serve HTTP/REST (default: true)" in text
    assert "(default: half the open-file limit, at most 10000)" in text
    assert "(default: None)" not in text and "(default: True)" not in text


def test_a_failed_start_up_load_exits_by_default(tmp_path: Path) -> None:
    # Triton's --exit-on-error is true: a model that fails at start-up ends the server with
    # code 1 and "error: creating server: Internal - failed to load all models" (Kubernetes
    # restarts it; Triton's lifecycle QA relies on it). `dev` keeps serving (test_dev.py).
    repo = broken_repo(tmp_path / "repo")
    proc = subprocess.run(
        [sys.executable, "-m", "modelyard", "serve", str(repo), "--http-port=0",
         "--grpc-port=0", "--metrics-port=0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "error: creating server: Internal - failed to load all models"
    )
    assert "failed to load all models: bad_import, bad_syntax" in messages(proc.stderr)


def test_exit_on_error_stops_with_the_endpoints_up(tmp_path: Path) -> None:
    repo = broken_repo(tmp_path / "repo")
    stderr = refused_start(
        repo, "--exit-on-error", "--http-port=0", "--grpc-port=0", "--metrics-port=0"
    )
    lines = messages(stderr)
    assert "failed to load all models: bad_import, bad_syntax" in lines
    assert lines[-1] == "stopped"


@pytest.mark.parametrize("mode", MODES)
def test_a_signal_while_models_load_stops_the_server(mode: str, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    gate = tmp_path / "gate"
    _gated_model(repo, gate)
    server = start_server(repo, *mode_args(mode), wait_for_models=False)
    try:
        server.wait_for_log("loading: slow")
        server.proc.terminate()
        server.wait_for_log("stopping while the models load")
        gate.touch()  # (an in-process initialize cannot be interrupted: let it end)
        assert server.proc.wait(60) == 0
    finally:
        server.stop()
    lines = messages(final_output(server))
    assert lines[-1] == "stopped"
    assert not any(m.startswith("initial model load done") for m in lines)


def test_the_repository_as_an_argument(tmp_path: Path) -> None:
    """``modelyard serve REPOSITORY``, as ``dev`` and ``check`` take it."""
    repo = tmp_path / "repo"
    shutil.copytree(
        EXAMPLES / "add_sub", repo / "add_sub", ignore=shutil.ignore_patterns("__pycache__")
    )
    srv = start_server([], str(repo))
    try:
        client = httpclient.InferenceServerClient(srv.http_url)
        assert client.is_model_ready("add_sub")
        client.close()
    finally:
        srv.stop()


def test_no_repository_is_one_line() -> None:
    run = subprocess.run([sys.executable, "-m", "modelyard", "serve"], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert run.returncode == 2
    assert run.stderr == (
        "modelyard serve: error: no model repository: modelyard serve REPOSITORY "
        "(or --model-repository PATH)\n"
    )
