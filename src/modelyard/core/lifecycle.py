"""Turning a model folder into running versions: config, auto-complete, instances."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any

from modelyard.backends.python.server.backend import (
    create_instances,
    prepare_exec_env,
    run_auto_complete,
)
from modelyard.backends.python.server.exec_env import ExecEnv
from modelyard.backends.python.server.process_instance import PythonWorker
from modelyard.config import render
from modelyard.config.normalize import normalize_config
from modelyard.config.pbtxt import load_config_file
from modelyard.config.repository import available_versions, select_versions
from modelyard.config.validate import validate_config
from modelyard.core.ensembles import load_ensemble
from modelyard.core.model_version import LoadOptions, ModelVersion
from modelyard.core.tensor_models import is_tensor_model, load_tensor_model
from modelyard.core.validation import signature_from_config
from modelyard.core.warmup import warm_up
from modelyard.errors import ModelyardError, Unsupported, VersionLoadError
from modelyard.scheduling.base import Scheduler
from modelyard.scheduling.default import DefaultScheduler
from modelyard.scheduling.dynamic import BatcherConfig, DynamicBatcher
from modelyard.scheduling.iterative import IterativeSequenceBatcher
from modelyard.scheduling.sequence import SequenceBatcher
from modelyard.serving.host import ModelHost
from modelyard.serving.stats import ModelStats

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer

log = logging.getLogger("modelyard")


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
        files = set(os.listdir(vdir))
        if cfg.default_model_filename and cfg.default_model_filename.endswith(".py"):
            cfg.backend = "python"
            return
        if "model.py" in files:
            cfg.backend = "python"
            return
        if "model.onnx" in files:
            cfg.backend = "onnxruntime"
            cfg.platform = "onnxruntime_onnx"
            return
        if "model.pt" in files:
            cfg.backend = "pytorch"
            cfg.platform = "pytorch_libtorch"
            return


def read_config(name: str, model_dir: str, override: Any | None) -> Any:
    from tritonclient.grpc import model_config_pb2

    if override is not None:
        cfg = override
    else:
        path = os.path.join(model_dir, "config.pbtxt")
        cfg = load_config_file(path) if os.path.isfile(path) else model_config_pb2.ModelConfig()
    if not cfg.name:
        cfg.name = name
    _detect_backend(cfg, model_dir)
    return cfg


async def python_config(
    name: str,
    model_dir: str,
    cfg: Any,
    opts: LoadOptions,
    host: ModelHost | None,
    isolate: bool = False,
) -> tuple[Any, list[int], ExecEnv | None, PythonWorker | None]:
    """What loading makes of a Python model's config before any instance starts: normalized,
    auto-completed by the model (``auto_complete_config``, in the worker that becomes the first
    instance; ``isolate``: always in a worker process), normalized again and validated.
    Returns the config, the versions to load, the model's environment and that worker. The
    model's own failures (a ``model.py`` that does not import) raise VersionLoadError for the
    latest version, as Triton reports them."""
    py = opts.python
    cfg = normalize_config(
        cfg,
        name,
        model_dir=model_dir,
        backend_default_max_batch_size=py.default_max_batch_size,
        auto_complete=opts.auto_complete,
    )
    versions = select_versions(cfg, available_versions(model_dir))
    env = await prepare_exec_env(cfg, model_dir, max(versions), py)
    first: PythonWorker | None = None
    if opts.auto_complete:
        try:
            cfg, first = await run_auto_complete(
                cfg, model_dir, max(versions), py, host, env, isolate
            )
        except VersionLoadError:
            raise
        except ModelyardError as e:
            raise VersionLoadError(max(versions), e.message, e.code) from None
    try:
        if opts.auto_complete:
            cfg = normalize_config(
                cfg,
                name,
                model_dir=model_dir,
                backend_default_max_batch_size=py.default_max_batch_size,
                auto_complete=True,
            )
        validate_config(cfg)
    except BaseException:
        if first is not None:
            await first.stop()
        raise
    return cfg, versions, env, first


async def load_model(
    name: str,
    model_dir: str,
    opts: LoadOptions,
    core: InferenceServer,
    override: Any | None = None,
) -> list[ModelVersion]:
    """Load every version the policy selects; raise ModelyardError naming the cause."""
    cfg = read_config(name, model_dir, override)
    if cfg.platform == "ensemble":
        return await load_ensemble(name, model_dir, cfg, core)
    if is_tensor_model(cfg):
        return await load_tensor_model(name, model_dir, cfg, opts)
    if cfg.backend != "python":
        raise Unsupported(
            f"model '{name}': backend '{cfg.backend or cfg.platform or 'unknown'}' is not supported"
            " by this server (supported: python, onnxruntime, pytorch)"
        )
    cfg, versions, env, first = await python_config(name, model_dir, cfg, opts, core.host)
    py = opts.python
    loaded: list[ModelVersion] = []
    try:
        for v in sorted(versions, reverse=True):
            instances = create_instances(cfg, model_dir, v, py, core.host, first, env)
            first = None
            results = await asyncio.gather(*(i.start() for i in instances), return_exceptions=True)
            errors = [r for r in results if isinstance(r, BaseException)]
            if errors:
                await asyncio.gather(*(i.stop() for i in instances), return_exceptions=True)
                err = errors[0]
                if isinstance(err, ModelyardError):
                    raise VersionLoadError(v, err.message, err.code) from None
                raise err
            try:
                await warm_up(cfg, model_dir, v, instances)
            except BaseException:
                await asyncio.gather(*(i.stop() for i in instances), return_exceptions=True)
                raise
            sched: Scheduler
            if cfg.sequence_batching.iterative_sequence:
                sched = IterativeSequenceBatcher(name, instances, cfg)
            elif cfg.HasField("sequence_batching"):
                sched = SequenceBatcher(name, instances, cfg)
            elif cfg.HasField("dynamic_batching") and cfg.max_batch_size > 0:
                sched = DynamicBatcher(name, instances, BatcherConfig.from_config(cfg))
            else:
                sched = DefaultScheduler(name, instances)
            stats = ModelStats(name, str(v))
            sched.stats = stats
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
        if first is not None:
            await first.stop()
        for mv in loaded:
            await mv.stop(0.0)
        raise
    return loaded
