"""The typed server configuration: built from the command line with the CLI's own defaults,
every flag read into a field, bad values refused with the command's texts and exit codes;
and a server started from Python with one, driven with tritonclient."""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from modelyard.cli.main import build_parser
from modelyard.dev import in_process
from modelyard.server import INITIAL_LOAD_DONE
from modelyard.server_config import ServerConfig, config_from_args
from modelyard.testing import ServerProcess
from tests.conftest import Serving
from tests.helpers import EXAMPLES, infer_grpc, infer_http


def cli(*argv: str) -> ServerConfig:
    """The configuration the ``modelyard`` command builds from ``argv``."""
    return config_from_args(build_parser().parse_args(list(argv)))


# -- defaults and fields ----------------------------------------------------------------------


def test_from_python_the_defaults_are_the_commands() -> None:
    config = ServerConfig.from_args(["repo"])
    assert config == cli("serve", "repo")
    assert config == ServerConfig.from_args(["--model-repository", "repo"])
    # Triton's defaults, read from the one parser
    e = config.endpoints
    assert [(x.allow, x.address, x.port) for x in (e.http, e.grpc, e.metrics)] == [
        (True, "0.0.0.0", 8000), (True, "0.0.0.0", 8001), (True, "0.0.0.0", 8002),
    ]  # fmt: skip
    core = config.core
    assert core.repositories == ["repo"] and core.control_mode == "none"
    assert (core.server_id, core.exit_timeout, core.exit_on_error) == ("triton", 30.0, True)
    assert (core.strict_readiness, core.load.auto_complete, core.poll_secs) == (True, True, 15.0)
    assert config.openai is None and config.ray is None and config.warnings == ()
    assert not (config.cloud.allow_sagemaker or config.cloud.allow_vertex_ai)
    assert config.log.log_verbose_level == 0 and config.log.log_file == ""


def test_dev_takes_serves_flags_with_its_own_defaults() -> None:
    config = cli("dev", "repo", "--model-repository", "more")
    assert config.core.repositories == ["repo", "more"]
    assert not config.core.exit_on_error and not config.core.namespacing
    assert config.ray is None
    python = in_process(config).core.load.settings("python")
    assert python == {"execution-mode": "in-process"}
    given = cli("dev", "repo", "--backend-config", "python,execution-mode=process")
    assert in_process(given).core.load.settings("python") == {"execution-mode": "process"}


class _Reads(argparse.Namespace):
    """A Namespace that remembers which attributes were read."""

    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("_"):
            object.__getattribute__(self, "_read").add(name)
        return object.__getattribute__(self, name)


def test_every_flag_of_serve_is_read_into_the_configuration() -> None:
    parser = build_parser()
    args = parser.parse_args(["serve", "repo", "--ray", "local", "--openai-port", "0"])
    reads = _Reads(**vars(args))
    object.__setattr__(reads, "_read", set())
    config_from_args(reads)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    serve = sub.choices["serve"]
    flags = {a.dest for a in serve._actions if a.option_strings and a.dest != "help"}
    assert flags - object.__getattribute__(reads, "_read") == set()


@pytest.mark.parametrize(
    ("flags", "field", "value"),
    [
        (("--http-port", "9", "--http-address", "127.0.0.1"), "endpoints.http.port", 9),
        (("--http-address", "127.0.0.2"), "endpoints.metrics.address", "127.0.0.2"),
        (("--allow-grpc=false",), "endpoints.grpc.allow", False),
        (("--model-control-mode", "explicit", "--load-model", "a"), "core.load_models", ["a"]),
        (("--exit-timeout-secs", "2.5"), "core.exit_timeout", 2.5),
        (("--strict-model-config",), "core.load.auto_complete", False),
        (("--backend-config", "python,k=v"), "core.load.backend_settings", {"python": {"k": "v"}}),
        (("--cache-config", "local,size=1024"), "core.cache_bytes", 1024),
        (("--trace-config", "rate=5"), "core.trace.rate", 5),
        (("--rate-limit", "execution_count"), "core.rate_limit.mode", "execution_count"),
        (("--id", "x"), "core.server_id", "x"),
        (("--http-max-connections", "7"), "frontends.http_limits.max_connections", 7),
        (("--http-max-connections", "7"), "frontends.http_max_connections", 7),
        (("--allow-dashboard=false",), "frontends.dashboard", False),
        (("--reuse-grpc-port",), "frontends.grpc_channel.reuse_port", True),
        (("--openai-port", "0", "--default-max-tokens", "3"), "openai.default_max_tokens", 3),
        (("--allow-sagemaker", "--sagemaker-port", "9"), "cloud.sagemaker_port", 9),
        (("--ray", "local", "--ray-num-cpus", "2"), "ray.num_cpus", 2.0),
        (("--log-verbose", "2"), "log.log_verbose_level", 2),
        (("--heap-retain-mb", "0"), "heap_retain_mb", 0),
        (("--min-supported-compute-capability", "7.5"), "min_compute_capability", 7.5),
        (("--sagemaker-thread-count", "3"), "ignored.sagemaker_thread_count", 3),
    ],
)  # fmt: skip
def test_flags_map_to_fields(flags: tuple[str, ...], field: str, value: object) -> None:
    got: Any = ServerConfig.from_args(["repo", *flags])
    for name in field.split("."):
        got = getattr(got, name)
    assert got == value


def test_the_configuration_is_frozen() -> None:
    config = ServerConfig.from_args(["repo"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.heap_retain_mb = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.endpoints.http.port = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.core.load.config_name = "x"  # type: ignore[misc]
    changed = dataclasses.replace(config, heap_retain_mb=0)
    assert changed.heap_retain_mb == 0 and config.heap_retain_mb != 0


# -- bad values -------------------------------------------------------------------------------


def test_tritons_gpu_pool_sizes_are_taken_and_kept() -> None:
    config = cli("serve", "repo", "--cuda-memory-pool-byte-size=0:67108864",
                 "--cuda-memory-pool-byte-size", "1:0")  # fmt: skip
    assert config.ignored.cuda_memory_pool_byte_size == ((0, 67108864), (1, 0))


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (("--grpc-use-ssl",),
         "modelyard serve: error: argument --grpc-server-cert: needed with --grpc-use-ssl"),
        (("--http-header-forward-pattern", "a("),
         "modelyard serve: error: argument --http-header-forward-pattern: not a regular "
         "expression"),
        (("--http-port", "8080", "--allow-sagemaker"),
         "modelyard serve: error: The server cannot listen to HTTP requests and SageMaker "
         "requests at the same address and port 0.0.0.0:8080"),
        (("--ray", "auto", "--allow-vertex-ai"),
         "modelyard serve: error: --allow-sagemaker and --allow-vertex-ai are not served with "
         "--ray yet"),
        (("--ray", "auto", "--ray-num-gpus", "1"),
         "modelyard serve: error: --ray-num-gpus sizes the Ray instance of --ray local; the "
         "cluster at 'auto' has its own"),
        (("--http-port", "x"),
         "modelyard serve: error: argument --http-port: invalid int value: 'x'"),
        (("--cuda-memory-pool-byte-size", "67108864"),
         "modelyard serve: error: argument --cuda-memory-pool-byte-size: expected <GPU id>:"
         "<bytes>, got '67108864'"),
    ],
)  # fmt: skip
def test_a_bad_command_line_is_one_line_and_exit_code_2(
    flags: tuple[str, ...], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        ServerConfig.from_args(["repo", *flags])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith(line), err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--log-verbose", "-1"), "--log-verbose must be 0 or more, got -1"),
        (("--heap-retain-mb", "-1"), "--heap-retain-mb must be 0 or more, got -1"),
        (("--http-max-input-size", "0"), "Error: --http-max-input-size must be greater than 0."),
        (("--ray", "auto", "--model-namespacing"),
         "--model-namespacing is not supported with --ray"),
        (("--backend-config", "python"),
         "--backend-config expects BACKEND,KEY=VALUE, got 'python'"),
        (("--cache-config", "redis,size=1"),
         "--cache-config: cache 'redis' is not supported (supported: local)"),
        (("--http-restricted-api", "nope:k=v"), 'Bad option: "--http-restricted-api".\n'),
    ],
)  # fmt: skip
def test_a_value_serve_cannot_start_with_is_its_message(
    flags: tuple[str, ...], message: str
) -> None:
    with pytest.raises(SystemExit) as e:
        ServerConfig.from_args(["repo", *flags])
    assert str(e.value.code).startswith(message)


def test_the_commands_name_is_in_its_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli("dev", "repo", "--http-use-ssl")
    assert e.value.code == 2
    assert capsys.readouterr().err == (
        "modelyard dev: error: argument --http-server-cert: needed with --http-use-ssl\n"
    )
    with pytest.raises(SystemExit) as e:
        ServerConfig.from_args([])
    assert e.value.code == 2
    assert capsys.readouterr().err == (
        "modelyard serve: error: no model repository: modelyard serve REPOSITORY "
        "(or --model-repository PATH)\n"
    )


# -- a server started from Python ---------------------------------------------------------------

SCRIPT = textwrap.dedent(
    """
    import dataclasses, sys

    from modelyard.server import serve
    from modelyard.server_config import ServerConfig

    config = ServerConfig.from_args(sys.argv[1:])
    config = dataclasses.replace(
        config, core=dataclasses.replace(config.core, server_id="from-python")
    )
    sys.exit(serve(config))
    """
)


def _start(repo: Path, *flags: str) -> ServerProcess:
    local = [f"--{e}-{w}" for e in ("http", "grpc", "metrics") for w in ("port", "address")]
    values = ["0", "127.0.0.1"] * 3
    argv = [a for pair in zip(local, values, strict=True) for a in pair]
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(repo), *argv, *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    server = ServerProcess(proc)

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            server.log.append(line)
        server.eof.set()

    threading.Thread(target=pump, daemon=True).start()
    return server


def test_a_server_started_from_python_serves_tritonclient(serving: Serving) -> None:
    repo = serving.repo(["add_sub"], source=EXAMPLES)
    server = _start(repo)
    try:
        for key, name in (("http", "HTTPService"), ("grpc", "GRPCInferenceService")):
            started = re.compile(rf"Started {name} at [\d.]+:(\d+)")
            match = server.wait_for_log(started, timeout=60)
            server.ports[key] = int(match.group(1))
        server.wait_for_log(INITIAL_LOAD_DONE, timeout=60)
        a = np.arange(4, dtype=np.float32)
        b = np.ones(4, dtype=np.float32)
        http = httpclient.InferenceServerClient(server.http_url)
        assert http.get_server_metadata()["name"] == "from-python"
        out = infer_http(http, "add_sub", {"INPUT0": a, "INPUT1": b})
        np.testing.assert_array_equal(out.as_numpy("OUTPUT0"), a + b)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        assert grpc.get_server_metadata().name == "from-python"
        out = infer_grpc(grpc, "add_sub", {"INPUT0": a, "INPUT1": b})
        np.testing.assert_array_equal(out.as_numpy("OUTPUT1"), a - b)
    finally:
        code = server.stop()
    assert code == 0, server.output()
    assert "stopped" in server.output()
