"""The one loading pipeline: a model folder becomes running versions.

read the config → the backend by name (``backends/loader.py``) prepares it (normalise,
auto-complete, validate) → per version: its instances, started and warmed up → the one
scheduler the config asks for → a :class:`ModelVersion`. ``serve``, ``dev``, ``check``,
``modelyard.testing`` and the replicas of ``--ray`` all load through here.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
from typing import TYPE_CHECKING, Any

from modelyard.backends.instance import Instance
from modelyard.backends.loader import LoadOptions, backend_for
from modelyard.backends.tensor_loader import version_error
from modelyard.config import render
from modelyard.config.pbtxt import load_config_file
from modelyard.config.repository import model_config_path
from modelyard.core.ensembles import load_ensemble
from modelyard.core.model_version import ModelVersion
from modelyard.core.validation import signature_from_config
from modelyard.core.warmup import warm_up
from modelyard.errors import VersionLoadError
from modelyard.scheduling.base import Scheduler
from modelyard.scheduling.default import DefaultScheduler
from modelyard.scheduling.dynamic import BatcherConfig, DynamicBatcher
from modelyard.scheduling.iterative import IterativeSequenceBatcher
from modelyard.scheduling.rate_limiter import Gate, InstanceLimits, RateLimiter, instance_limits
from modelyard.scheduling.sequence import SequenceBatcher
from modelyard.serving.host import ModelHost
from modelyard.serving.stats import ModelStats

if TYPE_CHECKING:
    from modelyard.core.parts import Loads

log = logging.getLogger("modelyard")

# A version folder's default model file, and the backend (and platform) it implies when the
# config names neither.
_DEFAULT_FILES = (
    ("model.py", "python", ""),
    ("model.onnx", "onnxruntime", "onnxruntime_onnx"),
    ("model.pt", "pytorch", "pytorch_libtorch"),
)


def _detect_backend(cfg: Any, model_dir: str) -> None:
    """Fill backend/platform from the model files when the config names neither."""
    if cfg.backend or cfg.platform:
        if cfg.platform == "onnxruntime_onnx" and not cfg.backend:
            cfg.backend = "onnxruntime"
        return
    for entry in sorted(os.listdir(model_dir)):
        vdir = os.path.join(model_dir, entry)
        if not (entry.isdigit() and os.path.isdir(vdir)):
            continue
        if cfg.default_model_filename and cfg.default_model_filename.endswith(".py"):
            cfg.backend = "python"
            return
        files = set(os.listdir(vdir))
        for filename, backend, platform in _DEFAULT_FILES:
            if filename in files:
                cfg.backend, cfg.platform = backend, platform
                return


def read_config(name: str, model_dir: str, override: Any | None, config_name: str = "") -> Any:
    """The model's config: ``override`` (a load request's), else its config file (see
    ``model_config_path``), else an empty one; named, and its backend found from the files when it
    names none."""
    from tritonclient.grpc import model_config_pb2

    if override is not None:
        cfg = override
    else:
        path = str(model_config_path(model_dir, config_name))
        cfg = load_config_file(path) if os.path.isfile(path) else model_config_pb2.ModelConfig()
    if not cfg.name:
        cfg.name = name
    _detect_backend(cfg, model_dir)
    return cfg


def make_scheduler(
    name: str,
    instances: list[Instance],
    cfg: Any,
    stats: ModelStats,
    limiter: RateLimiter | None = None,
) -> Scheduler:
    """The scheduler the config asks for, in front of the version's instances; it counts the
    version's executions in ``stats``. With a ``limiter`` (--rate-limit=execution_count) the
    instances take turns through it: InvalidArgument when it cannot serve what they ask."""
    gate = None
    if limiter is not None:
        asked = instance_limits(cfg)
        asked += [InstanceLimits()] * (len(instances) - len(asked))
        tickets = limiter.register([i.name for i in instances], asked[: len(instances)])
        gate = Gate(limiter, instances, tickets)
    sched: DefaultScheduler | DynamicBatcher | SequenceBatcher | IterativeSequenceBatcher
    if cfg.sequence_batching.iterative_sequence:
        sched = IterativeSequenceBatcher(name, instances, cfg)
    elif cfg.HasField("sequence_batching"):
        sched = SequenceBatcher(name, instances, cfg)
    elif cfg.HasField("dynamic_batching") and cfg.max_batch_size > 0:
        sched = DynamicBatcher(name, instances, BatcherConfig.from_config(cfg))
    else:
        sched = DefaultScheduler(name, instances)
    sched.stats = stats
    sched.gate = gate
    return sched


async def _stop(instances: list[Instance]) -> None:
    await asyncio.gather(*(i.stop() for i in instances), return_exceptions=True)


async def load_model(
    name: str,
    model_dir: str,
    opts: LoadOptions,
    core: Loads,
    override: Any | None = None,
) -> list[ModelVersion]:
    """Load every version the policy selects; raise ModelyardError naming the cause."""
    cfg = read_config(name, model_dir, override, opts.config_name)
    if cfg.platform == "ensemble":
        return await load_ensemble(name, model_dir, cfg, core)
    for attempt in range(opts.retry_count):  # --model-load-retry-count: more tries, then this
        try:
            return await load_versions(
                name, model_dir, copy.deepcopy(cfg), opts, core.host, core.rate_limiter
            )
        except VersionLoadError as e:
            log.warning(
                "failed to load '%s' version %d (try %d of %d): %s",
                name,
                e.version,
                attempt + 1,
                opts.retry_count + 1,
                e.reason,
            )
    return await load_versions(name, model_dir, cfg, opts, core.host, core.rate_limiter)


async def load_versions(
    name: str,
    model_dir: str,
    cfg: Any,
    opts: LoadOptions,
    host: ModelHost | None,
    limiter: RateLimiter | None = None,
) -> list[ModelVersion]:
    """The backend's versions of a model that is not an ensemble (see the module's doc)."""
    backend = backend_for(cfg)
    model = await backend.prepare(name, model_dir, cfg, opts, host)
    cfg = model.config
    loaded: list[ModelVersion] = []
    try:
        for v in sorted(model.versions, reverse=True):
            instances = await backend.create_instances(model, model_dir, v, opts, host)
            results = await asyncio.gather(*(i.start() for i in instances), return_exceptions=True)
            errors = [r for r in results if isinstance(r, BaseException)]
            stats = ModelStats(name, str(v))
            sched: Scheduler | None = None
            try:
                with version_error(v):
                    if errors:
                        raise errors[0]
                    # (the rate limiter takes the instances before their warm-up, as Triton's)
                    sched = make_scheduler(name, instances, cfg, stats, limiter)
                await warm_up(cfg, model_dir, v, instances)
            except BaseException:
                if sched is not None:
                    await sched.drain(0.0)  # (it leaves the rate limiter)
                await _stop(instances)
                raise
            loaded.append(
                ModelVersion(
                    name=name,
                    version=v,
                    config=cfg,
                    config_json=render.config_to_json(cfg),
                    signature=signature_from_config(cfg),
                    decoupled=bool(cfg.model_transaction_policy.decoupled),
                    instances=instances,
                    scheduler=sched,
                    stats=stats,
                )
            )
    except BaseException:
        await backend.discard(model)
        for mv in loaded:
            await mv.stop(0.0)
        raise
    return loaded


async def check_versions(name: str, model_dir: str, cfg: Any, opts: LoadOptions) -> None:
    """What loading does before a model's code runs in an instance (``modelyard check``): a
    Python model's config is prepared, its ``auto_complete_config`` run in a worker process of
    its own; a backend that runs no model code loads each version and stops it again."""
    backend = backend_for(cfg)
    if not backend.runs_model_code:
        for mv in await load_versions(name, model_dir, cfg, opts, None):
            await mv.stop(0.0)
        return
    model = await backend.prepare(name, model_dir, cfg, opts, None, isolate=True)
    await backend.discard(model)
