"""The rate limiter through the real server: models sharing a resource never run at once,
priorities decide who waits, the batchers form their batch when the limiter lets them run,
``--rate-limit=off`` changes nothing, loads the resources cannot serve are refused with
Triton's texts, the config endpoint shows ``rate_limiter``, and a bad flag is one line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from modelyard.cli.main import build_parser
from tests.conftest import Serving
from tests.helpers import MODES, Served, infer_http
from tests.scheduling import rate_limit_probes as rl
from tests.scheduling.rate_limit_probes import Probe

ON = ("--rate-limit=execution_count",)
REFUSED_R = (
    "load failed for model 'rl_big': version 1 is at UNAVAILABLE state: Invalid argument: "
    'Resource count for "R" is limited to 1 which will prevent scheduling of one or more '
    "model instances, the minimum required count is 2;\n"
)
CONFLICT = (
    'Invalid argument: Resource "S" is present as both global and device-specific resource '
    "in the model configuration."
)


@pytest.fixture(scope="module", params=MODES)
def limited(request: pytest.FixtureRequest, serving: Serving) -> Iterator[Served]:
    models = (*rl.MODELS, "resched_once")
    with serving.server(None, *ON, models=models, mode=request.param) as srv:
        yield Served(srv, request.param)


def probe(served: Served, tmp_path: Path) -> Probe:
    return Probe(served.server.http_url, served.server.metrics_url, tmp_path)


def test_models_sharing_a_resource_never_run_at_once(limited: Served, tmp_path: Path) -> None:
    executions = rl.under_load(probe(limited, tmp_path))
    assert len(executions) == 12
    assert rl.one_at_a_time(executions), sorted(executions, key=lambda e: e.start)


def test_a_request_waits_while_another_model_holds_the_resource(
    limited: Served, tmp_path: Path
) -> None:
    assert rl.waits_for_the_holder(probe(limited, tmp_path)) == {"a ran while hold ran": False}


def test_the_higher_priority_runs_first(limited: Served, tmp_path: Path) -> None:
    assert rl.priority_order(probe(limited, tmp_path)) == ["rl_hold", "rl_a", "rl_b"]


def test_a_dynamic_batch_grows_while_it_waits(limited: Served, tmp_path: Path) -> None:
    assert rl.batch_while_waiting(probe(limited, tmp_path)) == [3, 3, 3]


def test_a_sequence_waits_for_the_resource(limited: Served, tmp_path: Path) -> None:
    assert rl.sequence_waits(probe(limited, tmp_path))


def test_a_rescheduled_request_takes_its_turn_again(limited: Served) -> None:
    """An iterative sequence (resched_once runs each request twice) under the limiter."""
    with limited.http() as client:
        for _ in range(3):
            result = infer_http(client, "resched_once", {"IN": np.ones(4, np.float32)})
            assert result.as_numpy("EXECS").tolist() == [2]


def test_one_resource_both_global_and_per_device_fails_the_load(limited: Served) -> None:
    assert rl.index_reasons(limited.server.http_url)["rl_mixed"] == CONFLICT


def test_the_config_shows_the_rate_limiter(limited: Served) -> None:
    group = rl.config_json(limited.server.http_url, "rl_b")["instance_group"][0]
    assert group["rate_limiter"] == {
        "resources": [{"name": "R", "global": False, "count": 1}],
        "priority": 2,
    }


def test_off_lets_them_run_together(serving: Serving, tmp_path: Path) -> None:
    with serving.server(None, "--rate-limit=OFF", models=["rl_a", "rl_hold"]) as srv:
        seen = rl.runs_beside_the_holder(Probe(srv.http_url, srv.metrics_url, tmp_path))
    assert seen == {"a ran while hold ran": True}


def test_loads_the_resources_cannot_serve_are_refused(serving: Serving) -> None:
    flags = (*ON, "--rate-limit-resource=R:1", "--model-control-mode=explicit")
    with serving.server(None, *flags, models=["rl_a", "rl_big", "rl_mixed"]) as srv:
        assert rl.load_error(srv.http_url, "rl_big") == REFUSED_R
        assert rl.load_error(srv.http_url, "rl_mixed").endswith(
            'Resource count for "S" is limited to 0 which will prevent scheduling of one or '
            "more model instances, the minimum required count is 1;\n"
        )
        assert rl.load_error(srv.http_url, "rl_a") == ""  # what was refused left nothing held
        assert rl.index_reasons(srv.http_url)["rl_a"] == ""


@pytest.mark.parametrize(
    ("flag", "error"),
    [
        ("--rate-limit=sometimes", "expected execution_count or off, got 'sometimes'"),
        ("--rate-limit-resource=R", "--rate-limit-resource option format is "
         "'<resource_name>:<count>:<device>' or '<resource_name>:<count>'. Got R"),
        ("--rate-limit-resource=R:1:0:2", "--rate-limit-resource option format is "
         "'<resource_name>:<count>:<device>' or '<resource_name>:<count>'. Got R:1:0:2"),
        ("--rate-limit-resource=R:x", "Invalid option value. Got x"),
        ("--rate-limit-resource=R:1:gpu", "Invalid option value. Got gpu"),
        ("--rate-limit-resource=R:99999999999", "Provided option value is out of bound. "
         "Got 99999999999"),
    ],
)  # fmt: skip
def test_a_bad_flag_value_is_one_line(
    capsys: pytest.CaptureFixture[str], flag: str, error: str
) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["serve", "repo", flag])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == f"modelyard serve: error: argument {flag.split('=')[0]}: {error}"


def test_the_flags_as_triton_reads_them() -> None:
    args = build_parser().parse_args(
        ["serve", "repo", "--rate-limit=Execution_Count", "--rate-limit-resource=Gpu:2",
         "--rate-limit-resource= R:+3:1", "--rate-limit-resource=R:4x:0"]
    )  # fmt: skip
    assert args.rate_limit == "execution_count"
    assert args.rate_limit_resource == [("Gpu", 2, -1), (" R", 3, 1), ("R", 4, 0)]
    assert build_parser().parse_args(["serve", "repo"]).rate_limit == "off"
