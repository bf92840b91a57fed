"""Loading models of the tensor-runtime backends (onnxruntime, pytorch).

The same steps as Triton: normalize, auto-complete from the model file (where the backend
does), normalize again, validate, create the instances (each checks the config against the
model), start them, warm them up, and only then hand the versions to the core (ready).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from modelyard.backends.instance import Instance
from modelyard.config import render
from modelyard.config.normalize import normalize_config
from modelyard.config.repository import available_versions, select_versions
from modelyard.config.validate import validate_config
from modelyard.core.model_version import LoadOptions, ModelVersion
from modelyard.core.validation import signature_from_config
from modelyard.core.warmup import warm_up
from modelyard.errors import ModelyardError, Unsupported, VersionLoadError
from modelyard.serving.stats import ModelStats

if TYPE_CHECKING:
    from modelyard.scheduling.base import Scheduler

TENSOR_BACKENDS = ("onnxruntime", "pytorch")
TENSOR_PLATFORMS = ("onnxruntime_onnx", "pytorch_libtorch")
DEFAULT_MAX_BATCH_SIZE = 4  # Triton's --backend-config default-max-batch-size


def _default_max_batch_size(opts: LoadOptions, backend: str) -> int:
    settings = opts.backend_settings.get(backend, {})
    try:
        return int(settings.get("default-max-batch-size", DEFAULT_MAX_BATCH_SIZE))
    except ValueError:
        raise ModelyardError(
            f"--backend-config {backend},default-max-batch-size must be an integer"
        ) from None


def is_tensor_model(cfg: Any) -> bool:
    """Served here: named by backend, or by platform alone (normalization fills the backend)."""
    return cfg.backend in TENSOR_BACKENDS or (not cfg.backend and cfg.platform in TENSOR_PLATFORMS)


def _backend_module(backend: str) -> Any:
    if backend not in TENSOR_BACKENDS:
        raise Unsupported(f"backend '{backend}' is not supported")
    if backend == "onnxruntime":
        from modelyard.backends import onnxruntime

        return onnxruntime
    from modelyard.backends import pytorch

    return pytorch


@contextlib.contextmanager
def _version_error(version: int) -> Iterator[None]:
    """What the backend raises while loading a version fails that version, as in Triton
    (``version <v> is at UNAVAILABLE state: <Code>: <detail>``)."""
    try:
        yield
    except VersionLoadError:
        raise
    except ModelyardError as e:
        raise VersionLoadError(version, e.message, e.code) from None


def make_scheduler(name: str, instances: list[Instance], cfg: Any) -> Scheduler:
    from modelyard.scheduling.default import DefaultScheduler
    from modelyard.scheduling.dynamic import BatcherConfig, DynamicBatcher
    from modelyard.scheduling.sequence import SequenceBatcher

    if cfg.HasField("sequence_batching"):
        return SequenceBatcher(name, instances, cfg)
    if cfg.HasField("dynamic_batching") and cfg.max_batch_size > 0:
        return DynamicBatcher(name, instances, BatcherConfig.from_config(cfg))
    return DefaultScheduler(name, instances)


async def load_tensor_model(
    name: str, model_dir: str, cfg: Any, opts: LoadOptions
) -> list[ModelVersion]:
    """Load every version the policy selects of an onnxruntime or pytorch model."""
    cfg = normalize_config(cfg, name, model_dir=model_dir, auto_complete=opts.auto_complete)
    backend = str(cfg.backend)
    module = _backend_module(backend)
    mbs = _default_max_batch_size(opts, backend)
    versions = select_versions(cfg, available_versions(model_dir))
    if opts.auto_complete:
        # Off the loop: it opens the model file (big models take seconds).
        with _version_error(max(versions)):
            cfg = await asyncio.to_thread(module.auto_complete, cfg, model_dir, max(versions), mbs)
    validate_config(cfg)
    loaded: list[ModelVersion] = []
    try:
        for v in sorted(versions, reverse=True):
            with _version_error(v):
                instances: list[Instance] = await asyncio.to_thread(
                    module.create_instances, cfg, model_dir, v
                )
            results = await asyncio.gather(*(i.start() for i in instances), return_exceptions=True)
            errors = [r for r in results if isinstance(r, BaseException)]
            try:
                with _version_error(v):
                    if errors:
                        raise errors[0]
                await warm_up(cfg, model_dir, v, instances)
            except BaseException:
                await asyncio.gather(*(i.stop() for i in instances), return_exceptions=True)
                raise
            stats = ModelStats(name, str(v))
            sched = make_scheduler(name, instances, cfg)
            sched.stats = stats  # type: ignore[attr-defined]
            loaded.append(
                ModelVersion(
                    name=name,
                    version=v,
                    config=cfg,
                    config_json=render.config_to_json(cfg),
                    signature=signature_from_config(cfg),
                    decoupled=False,
                    instances=instances,
                    scheduler=sched,
                    stats=stats,
                )
            )
    except BaseException:
        for mv in loaded:
            await mv.stop(0.0)
        raise
    return loaded
