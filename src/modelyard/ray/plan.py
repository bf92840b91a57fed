"""From a model's ``config.pbtxt`` to the Ray Serve deployments that serve it (pure: no Ray).

One deployment per model version. ``instance_group`` counts add up to the number of replicas,
each replica running one instance of the model with modelyard's own scheduler (dynamic
batching per replica). ``KIND_GPU`` asks Ray for a GPU per replica. Config ``parameters``
named ``ray_*`` set what Ray needs to know:

=============================== ================================================================
``ray_num_cpus``                CPUs reserved per replica (default: ``--ray-replica-cpus``)
``ray_num_gpus``                GPUs per replica (default 1 for KIND_GPU, else 0; may be a fraction)
``ray_resources``               JSON object of custom resources per replica, e.g. ``{"gpu_node": 0.01}``
``ray_min_replicas``,           autoscaling bounds (replaces the fixed count; not for sequence
``ray_max_replicas``            models, whose sequences must stay on one replica)
``ray_target_ongoing_requests`` autoscaling target per replica (default 2)
``ray_max_replicas_per_node``   spread replicas over nodes
``ray_max_ongoing_requests``    requests one replica takes at once (default 1000: modelyard's own
                                bounded queues do the queueing, so the dynamic batcher sees them)
``ray_deploy_timeout_secs``     how long a load may take to start this model's replicas (default:
                                ``--ray-deploy-timeout-secs``; a model that loads for minutes)
=============================== ================================================================
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelyard.config.normalize import (
    autocomplete_backend_fields,
    normalize_instance_groups,
    normalize_model_config,
)
from modelyard.config.repository import available_versions, select_versions
from modelyard.errors import ConfigError

Group = model_config_pb2.ModelInstanceGroup
DEFAULT_MAX_ONGOING = 1000
DEFAULT_TARGET_ONGOING = 2.0
_KNOWN = frozenset(
    {
        "ray_num_cpus",
        "ray_num_gpus",
        "ray_resources",
        "ray_min_replicas",
        "ray_max_replicas",
        "ray_target_ongoing_requests",
        "ray_max_replicas_per_node",
        "ray_max_ongoing_requests",
        "ray_deploy_timeout_secs",
    }
)


@dataclass
class DeploymentPlan:
    """How one model's versions are deployed."""

    name: str
    versions: list[int]
    ensemble: bool
    sticky: bool  # a sequence model: requests of one sequence go to one replica
    num_replicas: int  # fixed count (ignored with autoscaling)
    autoscaling: dict[str, Any] | None
    actor_options: dict[str, Any]  # Ray actor options of each replica
    max_ongoing_requests: int
    max_replicas_per_node: int | None
    # The config each replica loads: one instance, no version policy yet (see replica_config).
    replica_base: Any = None
    # What the model's config shows of the cluster: instance groups and version policy.
    shown: Any = None
    deploy_timeout: float | None = None  # its ray_deploy_timeout_secs (None: the flag's)

    @property
    def resources(self) -> dict[str, float]:
        """What one replica asks of a node, in Ray's resource names."""
        opts = self.actor_options
        need = {"CPU": float(opts.get("num_cpus", 0)), "GPU": float(opts.get("num_gpus", 0))}
        need.update(opts.get("resources", {}))
        return {k: v for k, v in need.items() if v > 0}

    @property
    def replicas_at_start(self) -> int:
        """The replicas a version runs once deployed (autoscaling: its minimum)."""
        if self.autoscaling is not None:
            return int(self.autoscaling["min_replicas"])
        return self.num_replicas

    def replica_config(self, version: int) -> ModelConfig:
        """The config a replica of ``version`` loads: one instance of this version only."""
        cfg = ModelConfig()
        cfg.CopyFrom(self.replica_base)
        cfg.version_policy.Clear()
        cfg.version_policy.specific.versions.append(version)
        return cfg


def plan_deployment(
    name: str, raw: ModelConfig, model_dir: str, default_cpus: float
) -> DeploymentPlan:
    """Plan ``name``'s deployments from its raw config (file or load override). Raises
    ConfigError naming the model and parameter for settings Ray cannot take."""
    cfg = ModelConfig()
    cfg.CopyFrom(raw)
    autocomplete_backend_fields(cfg, name, model_dir)
    normalize_model_config(cfg)
    ensemble = cfg.platform == "ensemble"
    normalize_instance_groups(cfg)  # (no validation: KIND_GPU is fine on a cluster)
    versions = select_versions(cfg, available_versions(model_dir))
    params = _ray_parameters(name, cfg)
    gpu = any(g.kind == Group.KIND_GPU for g in cfg.instance_group)
    count = 1 if ensemble else max(1, sum(max(1, g.count) for g in cfg.instance_group))
    cpus = 0.0 if ensemble else _number(name, params, "ray_num_cpus", default_cpus)
    gpus = _number(name, params, "ray_num_gpus", 1.0 if gpu else 0.0)
    actor: dict[str, Any] = {"num_cpus": cpus}
    if gpus:
        actor["num_gpus"] = gpus
    if "ray_resources" in params:
        actor["resources"] = _resources(name, params["ray_resources"])
    sticky = cfg.HasField("sequence_batching")
    autoscaling = _autoscaling(name, params, sticky)
    per_node = _integer(name, params, "ray_max_replicas_per_node", 0) or None
    return DeploymentPlan(
        name=name,
        versions=versions,
        ensemble=ensemble,
        sticky=sticky,
        num_replicas=count,
        autoscaling=autoscaling,
        actor_options=actor,
        max_ongoing_requests=_integer(
            name, params, "ray_max_ongoing_requests", DEFAULT_MAX_ONGOING
        ),
        max_replicas_per_node=per_node,
        replica_base=_one_instance(raw, cfg),
        shown=_shown(cfg),
        deploy_timeout=_seconds(name, params, "ray_deploy_timeout_secs"),
    )


def _shown(normalized: ModelConfig) -> ModelConfig:
    out = ModelConfig()
    out.instance_group.extend(normalized.instance_group)
    out.version_policy.CopyFrom(normalized.version_policy)
    return out


def _one_instance(raw: ModelConfig, normalized: ModelConfig) -> ModelConfig:
    """``raw`` with a single instance: the replica is the unit Ray counts. A GPU group becomes
    KIND_MODEL (the model places itself on the GPU Ray gave the replica)."""
    out = ModelConfig()
    out.CopyFrom(raw)
    del out.instance_group[:]
    if normalized.platform == "ensemble" or not normalized.instance_group:
        return out
    first = normalized.instance_group[0]
    group = out.instance_group.add()
    group.name = first.name
    group.count = 1
    group.kind = Group.KIND_MODEL if first.kind == Group.KIND_GPU else first.kind
    return out


def _ray_parameters(name: str, cfg: ModelConfig) -> dict[str, str]:
    params = {k: v.string_value for k, v in cfg.parameters.items() if k.startswith("ray_")}
    unknown = sorted(set(params) - _KNOWN)
    if unknown:
        raise ConfigError(
            f"model '{name}': unknown Ray parameter '{unknown[0]}' (known: {', '.join(sorted(_KNOWN))})"
        )
    return params


def _number(name: str, params: dict[str, str], key: str, default: float) -> float:
    if key not in params:
        return default
    try:
        value = float(params[key])
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise ConfigError(
            f"model '{name}': parameter '{key}' must be a number >= 0, got '{params[key]}'"
        )
    return value


def _seconds(name: str, params: dict[str, str], key: str) -> float | None:
    if key not in params:
        return None
    try:
        value = float(params[key])
    except ValueError:
        value = 0.0
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(
            f"model '{name}': parameter '{key}' must be a number > 0, got '{params[key]}'"
        )
    return value


def _integer(name: str, params: dict[str, str], key: str, default: int) -> int:
    if key not in params:
        return default
    text = params[key].strip()
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise ConfigError(
            f"model '{name}': parameter '{key}' must be an integer >= 1, got '{params[key]}'"
        )
    return int(text)


def _resources(name: str, text: str) -> dict[str, float]:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"model '{name}': parameter 'ray_resources' is not JSON: {e}") from None
    if not isinstance(value, dict) or not all(
        isinstance(k, str)
        and isinstance(v, int | float)
        and not isinstance(v, bool)
        and math.isfinite(v)
        and v >= 0
        for k, v in value.items()
    ):
        raise ConfigError(
            f"model '{name}': parameter 'ray_resources' must be a JSON object of resource "
            f'names to amounts >= 0, e.g. {{"gpu_node": 0.01}}, got {text}'
        )
    return {k: float(v) for k, v in value.items()}


def _autoscaling(name: str, params: dict[str, str], sticky: bool) -> dict[str, Any] | None:
    if "ray_min_replicas" not in params and "ray_max_replicas" not in params:
        return None
    if sticky:
        raise ConfigError(
            f"model '{name}': a sequence model cannot autoscale (ray_min_replicas, "
            "ray_max_replicas): its sequences are routed to a fixed set of replicas"
        )
    low = _integer(name, params, "ray_min_replicas", 1)
    high = _integer(name, params, "ray_max_replicas", max(low, 1))
    if high < low:
        raise ConfigError(
            f"model '{name}': ray_max_replicas ({high}) is below ray_min_replicas ({low})"
        )
    target = _number(name, params, "ray_target_ongoing_requests", DEFAULT_TARGET_ONGOING)
    return {
        "min_replicas": low,
        "max_replicas": high,
        "target_ongoing_requests": target or DEFAULT_TARGET_ONGOING,
    }


def infeasible(need: dict[str, float], replicas: int, nodes: list[dict[str, float]]) -> str:
    """Why ``replicas`` replicas each asking ``need`` can never all run on ``nodes`` (their
    total resources, not what is free now: that only delays a replica), in one line naming
    what they ask and what the cluster has; "" when they can."""
    if not nodes:
        return "the Ray cluster has no live node"
    asked = render_resources(need)
    if not any(fits(need, node) for node in nodes):
        shapes = list(dict.fromkeys(render_resources(need, node) for node in nodes))
        more = f" and {len(shapes) - MAX_SHAPES} more" if len(shapes) > MAX_SHAPES else ""
        which = "its node has" if len(nodes) == 1 else "its nodes have"
        return (
            f"no node of the Ray cluster offers {asked} for one replica "
            f"({which} {', '.join(shapes[:MAX_SHAPES])}{more})"
        )
    total = {k: sum(node.get(k, 0.0) for node in nodes) for k in need}
    together = {k: v * replicas for k, v in need.items()}
    if replicas > 1 and not fits(together, total):
        return (
            f"its {replicas} replicas need {render_resources(together)} together, and the "
            f"Ray cluster has {render_resources(together, total)} in all"
        )
    return ""


def no_room(need: dict[str, float], free: dict[str, float], total: dict[str, float]) -> str:
    """Why a replica asking ``need`` waits to be placed ("" when the cluster's free resources
    would hold it: then it is starting, not waiting)."""
    if fits(need, free):
        return ""
    return (
        f"each needs {render_resources(need)}, and the Ray cluster has "
        f"{render_resources(need, free)} free of {render_resources(need, total)}"
    )


# Node shapes named in a message before "and N more".
MAX_SHAPES = 4
_EPSILON = 1e-9  # Ray counts resources in units of 1/10000


def fits(need: dict[str, float], offer: dict[str, float]) -> bool:
    return all(offer.get(k, 0.0) + _EPSILON >= v for k, v in need.items())


def render_resources(need: dict[str, float], offer: dict[str, float] | None = None) -> str:
    """``{CPU: 1, GPU: 0.5}``: ``need`` itself, or what ``offer`` has of the same resources."""
    shown = need if offer is None else {k: offer.get(k, 0.0) for k in need}
    return "{" + ", ".join(f"{k}: {_amount(v)}" for k, v in sorted(shown.items())) + "}"


def _amount(v: float) -> str:
    v = round(v, 4)
    return str(int(v)) if v == int(v) else repr(v)
