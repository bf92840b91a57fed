"""The pure parts of the Ray layer, without a cluster: config.pbtxt to deployment options
(src/modelyard/ray/plan.py), adding replicas' statistics up, errors that cross processes, and
the sticky router's choice."""

from __future__ import annotations

import pickle
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from modelyard.config.pbtxt import parse_config_text
from modelyard.errors import ConfigError, ErrorCode, ModelyardError, NotFound, VersionLoadError
from modelyard.ray.plan import infeasible, no_room, plan_deployment
from modelyard.ray.stats import add_stats
from modelyard.serving.stats import ModelStats


def model_dir(tmp_path: Path, name: str, config: str, versions: tuple[int, ...] = (1,)) -> Path:
    d = tmp_path / name
    for v in versions:
        (d / str(v)).mkdir(parents=True)
        (d / str(v) / "model.py").write_text("")
    (d / "config.pbtxt").write_text(textwrap.dedent(config))
    return d


def plan(tmp_path: Path, config: str, versions: tuple[int, ...] = (1,), cpus: float = 1.0):  # type: ignore[no-untyped-def]
    d = model_dir(tmp_path, "m", config, versions)
    raw = parse_config_text((d / "config.pbtxt").read_text(), str(d / "config.pbtxt"))
    return plan_deployment("m", raw, str(d), cpus)


def test_instance_groups_become_replicas_of_one_instance(tmp_path: Path) -> None:
    p = plan(
        tmp_path,
        """
        name: "m"
        backend: "python"
        instance_group [ { count: 2, kind: KIND_CPU }, { count: 1, kind: KIND_CPU } ]
        """,
    )
    assert p.num_replicas == 3
    assert p.actor_options == {"num_cpus": 1.0}
    assert p.resources == {"CPU": 1.0}
    assert [(g.count, g.name) for g in p.shown.instance_group] == [(2, "m_0"), (1, "m_1")]
    one = p.replica_config(1)
    assert [(g.count, g.name) for g in one.instance_group] == [(1, "m_0")]
    assert list(one.version_policy.specific.versions) == [1]
    assert not p.sticky and p.autoscaling is None and not p.ensemble


def test_defaults_without_instance_groups(tmp_path: Path) -> None:
    p = plan(tmp_path, 'name: "m"\nbackend: "python"\n', cpus=0.0)
    assert p.num_replicas == 1
    assert p.resources == {}
    assert p.max_ongoing_requests == 1000


def test_gpu_groups_ask_ray_for_a_gpu(tmp_path: Path) -> None:
    p = plan(
        tmp_path,
        """
        name: "m"
        backend: "python"
        instance_group [ { count: 2, kind: KIND_GPU } ]
        """,
    )
    assert p.num_replicas == 2
    assert p.resources == {"CPU": 1.0, "GPU": 1.0}
    # The replica's own config: one instance that places itself (on the GPU Ray gave it).
    assert p.replica_config(1).instance_group[0].kind == 3  # KIND_MODEL
    assert p.shown.instance_group[0].kind == 1  # KIND_GPU, as written


def test_ray_parameters(tmp_path: Path) -> None:
    p = plan(
        tmp_path,
        """
        name: "m"
        backend: "python"
        parameters { key: "ray_num_cpus" value: { string_value: "0.5" } }
        parameters { key: "ray_num_gpus" value: { string_value: "0.25" } }
        parameters { key: "ray_resources" value: { string_value: "{\\"fast\\": 1}" } }
        parameters { key: "ray_min_replicas" value: { string_value: "1" } }
        parameters { key: "ray_max_replicas" value: { string_value: "4" } }
        parameters { key: "ray_max_replicas_per_node" value: { string_value: "1" } }
        parameters { key: "ray_max_ongoing_requests" value: { string_value: "64" } }
        parameters { key: "ray_deploy_timeout_secs" value: { string_value: "12.5" } }
        """,
    )
    assert p.resources == {"CPU": 0.5, "GPU": 0.25, "fast": 1.0}
    assert p.autoscaling == {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 2.0}
    assert p.max_replicas_per_node == 1
    assert p.max_ongoing_requests == 64
    assert p.deploy_timeout == 12.5
    assert plan(tmp_path / "d", 'name: "m"\nbackend: "python"\n').deploy_timeout is None


@pytest.mark.parametrize(
    ("param", "value", "message"),
    [
        ("ray_bogus", "1", "model 'm': unknown Ray parameter 'ray_bogus'"),
        ("ray_num_cpus", "-1", "parameter 'ray_num_cpus' must be a number >= 0, got '-1'"),
        ("ray_resources", "[1]", "parameter 'ray_resources' must be a JSON object"),
        ("ray_resources", "{", "parameter 'ray_resources' is not JSON"),
        ("ray_max_replicas", "0", "parameter 'ray_max_replicas' must be an integer >= 1"),
        (
            "ray_deploy_timeout_secs",
            "0",
            "parameter 'ray_deploy_timeout_secs' must be a number > 0",
        ),
        ("ray_deploy_timeout_secs", "x", "'ray_deploy_timeout_secs' must be a number > 0, got 'x'"),
    ],
)
def test_bad_ray_parameters_name_the_model_and_parameter(
    tmp_path: Path, param: str, value: str, message: str
) -> None:
    param_line = f'parameters {{ key: "{param}" value: {{ string_value: "{value}" }} }}'
    with pytest.raises(ConfigError) as e:
        plan(tmp_path, f'name: "m"\nbackend: "python"\n{param_line}\n')
    assert message in e.value.message


def test_sequence_models_are_sticky_and_never_autoscale(tmp_path: Path) -> None:
    seq = 'name: "m"\nbackend: "python"\nsequence_batching { }\n'
    assert plan(tmp_path / "a", seq).sticky
    auto = seq + 'parameters { key: "ray_max_replicas" value: { string_value: "2" } }\n'
    with pytest.raises(ConfigError, match="a sequence model cannot autoscale"):
        plan(tmp_path / "b", auto)


def test_each_selected_version_is_deployed(tmp_path: Path) -> None:
    p = plan(tmp_path, 'name: "m"\nbackend: "python"\nversion_policy { all { } }\n', (1, 2, 3))
    assert p.versions == [1, 2, 3]
    assert plan(tmp_path / "x", 'name: "m"\nbackend: "python"\n', (1, 2, 3)).versions == [3]


def test_infeasible_requests_are_named() -> None:
    nodes = [{"CPU": 2.0, "node_a": 100.0}, {"CPU": 2.0, "GPU": 1.0}]
    assert infeasible({"CPU": 1.0, "GPU": 1.0}, 1, nodes) == ""
    assert infeasible({"GPU": 2.0}, 1, nodes) == (
        "no node of the Ray cluster offers {GPU: 2} for one replica "
        "(its nodes have {GPU: 0}, {GPU: 1})"
    )
    assert infeasible({"node_a": 0.01, "GPU": 1.0}, 1, nodes) == (
        "no node of the Ray cluster offers {GPU: 1, node_a: 0.01} for one replica "
        "(its nodes have {GPU: 0, node_a: 100}, {GPU: 1, node_a: 0})"
    )
    assert infeasible({"CPU": 4.0}, 1, [{"CPU": 2.0}]) == (
        "no node of the Ray cluster offers {CPU: 4} for one replica (its node has {CPU: 2})"
    )
    assert infeasible({}, 1, []) == "the Ray cluster has no live node"


def test_replicas_that_cannot_run_together_are_named() -> None:
    nodes = [{"CPU": 2.0}]
    assert infeasible({"CPU": 1.0}, 2, nodes) == ""
    assert infeasible({"CPU": 0.1}, 20, nodes) == ""  # (no rounding error at the limit)
    assert infeasible({"CPU": 1.5}, 2, nodes) == (
        "its 2 replicas need {CPU: 3} together, and the Ray cluster has {CPU: 2} in all"
    )
    assert infeasible({"CPU": 1.5}, 2, [*nodes, {"CPU": 2.0}]) == ""


def test_replicas_without_room_name_what_is_free() -> None:
    total = {"CPU": 2.0, "memory": 1e9}
    assert no_room({"CPU": 1.0}, {"CPU": 1.5}, total) == ""
    assert no_room({"CPU": 1.95}, {"CPU": 1.8}, total) == (
        "each needs {CPU: 1.95}, and the Ray cluster has {CPU: 1.8} free of {CPU: 2}"
    )
    assert no_room({"GPU": 0.5}, {}, {"CPU": 2.0}) == (
        "each needs {GPU: 0.5}, and the Ray cluster has {GPU: 0} free of {GPU: 0}"
    )


def test_the_default_cpus_per_replica_are_a_fraction(tmp_path: Path) -> None:
    from modelyard.cli.main import build_parser

    args = build_parser().parse_args(["serve", "r", "--ray", "local"])
    assert 0 < args.ray_replica_cpus < 1
    assert args.ray_num_cpus is None and args.ray_num_gpus is None
    p = plan(tmp_path, 'name: "m"\nbackend: "python"\n', cpus=args.ray_replica_cpus)
    assert p.resources == {"CPU": args.ray_replica_cpus}


def test_statistics_of_replicas_add_up() -> None:
    a, b = ModelStats("m", "1"), ModelStats("m", "1")
    a.record_success(0, 10, 20, 100, 1)
    a.record_execution(1, 80)
    b.record_success(0, 5, 5, 50, 2)
    b.record_execution(2, 45)
    b.record_failure(0, 7, "REJECTED")
    total = ModelStats("m", "1")
    add_stats(total, a)
    add_stats(total, b)
    d = total.as_dict()
    assert d["inference_count"] == 3 and d["execution_count"] == 2
    assert d["inference_stats"]["success"] == {"count": 2, "ns": 150}
    assert d["inference_stats"]["fail"] == {"count": 1, "ns": 7}
    assert [s["batch_size"] for s in d["batch_stats"]] == [1, 2]
    assert total.fail_reasons["REJECTED"] == 1


@pytest.mark.parametrize(
    "error",
    [
        NotFound("no such model"),
        ModelyardError("custom", ErrorCode.UNAVAILABLE),
        VersionLoadError(3, "boom", ErrorCode.INTERNAL),
    ],
)
def test_errors_keep_class_code_and_message_across_processes(error: ModelyardError) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert (back.code, back.message, str(back)) == (error.code, error.message, str(error))
    assert vars(back) == vars(error)


def test_sticky_router_agrees_on_one_owner_per_key() -> None:
    pytest.importorskip("ray.serve", reason="ray[serve] is not installed")
    from modelyard.ray.router import owner

    replicas = [SimpleNamespace(replica_id=SimpleNamespace(unique_id=u)) for u in "abcd"]
    owners = {k: owner(k, replicas).replica_id.unique_id for k in map(str, range(200))}  # type: ignore[arg-type]
    assert set(owners.values()) == set("abcd")  # keys spread over every replica
    shuffled = list(reversed(replicas))
    assert all(owner(k, shuffled).replica_id.unique_id == o for k, o in owners.items())  # type: ignore[arg-type]
    # A replica that goes away moves only its own keys.
    rest = [r for r in replicas if r.replica_id.unique_id != "a"]
    moved = {k for k, o in owners.items() if owner(k, rest).replica_id.unique_id != o}  # type: ignore[arg-type]
    assert moved == {k for k, o in owners.items() if o == "a"}


def test_the_local_instance_s_size_is_refused_for_a_cluster_one_joins() -> None:
    pytest.importorskip("ray.serve", reason="ray[serve] is not installed")
    from dataclasses import replace

    from modelyard.server_config import ServerConfig, local_flags_problem

    local = ServerConfig.from_args(["r", "--ray", "local", "--ray-num-cpus", "2"]).ray
    assert local is not None and local_flags_problem(local) == ""
    joined = ServerConfig.from_args(["r", "--ray", "auto"]).ray
    assert joined is not None and local_flags_problem(joined) == ""
    problem = local_flags_problem(replace(joined, num_gpus=1.0))
    assert problem == (
        "--ray-num-gpus sizes the Ray instance of --ray local; the cluster at 'auto' has its own"
    )
