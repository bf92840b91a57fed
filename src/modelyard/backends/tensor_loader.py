"""The tensor-runtime backends (onnxruntime, pytorch) as the loading pipeline drives them.

The same steps as Triton: normalise, auto-complete from the model file (where the backend
does), normalise again, validate; each instance checks the config against the model file.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

from modelyard.backends.instance import Instance
from modelyard.backends.loader import LoadOptions, PreparedModel
from modelyard.config.normalize import normalize_config
from modelyard.config.repository import available_versions, select_versions
from modelyard.config.validate import validate_config
from modelyard.errors import ModelyardError, VersionLoadError
from modelyard.serving.host import ModelHost

DEFAULT_MAX_BATCH_SIZE = 4  # Triton's --backend-config default-max-batch-size


@contextlib.contextmanager
def version_error(version: int) -> Iterator[None]:
    """What the backend raises while loading a version fails that version, as in Triton
    (``version <v> is at UNAVAILABLE state: <Code>: <detail>``)."""
    try:
        yield
    except VersionLoadError:
        raise
    except ModelyardError as e:
        raise VersionLoadError(version, e.message, e.code) from None


class TensorBackend:
    """One tensor runtime: ``module`` has ``auto_complete(cfg, model_dir, version,
    default_max_batch_size)`` and ``create_instances(cfg, model_dir, version)``."""

    runs_model_code = False

    def __init__(self, name: str, module: str) -> None:
        self.name = name
        self._module_name = module

    def _module(self) -> Any:  # imported on first load: onnxruntime and torch are heavy
        return importlib.import_module(self._module_name)

    def _default_max_batch_size(self, opts: LoadOptions) -> int:
        value = opts.settings(self.name).get("default-max-batch-size", DEFAULT_MAX_BATCH_SIZE)
        try:
            return int(value)
        except ValueError:
            raise ModelyardError(
                f"--backend-config {self.name},default-max-batch-size must be an integer"
            ) from None

    async def prepare(
        self,
        name: str,
        model_dir: str,
        cfg: Any,
        opts: LoadOptions,
        host: ModelHost | None,
        isolate: bool = False,
    ) -> PreparedModel:
        gpus = opts.supported_gpus()
        cfg = normalize_config(
            cfg, name, model_dir=model_dir, auto_complete=opts.auto_complete, gpus=gpus
        )
        mbs = self._default_max_batch_size(opts)
        versions = select_versions(cfg, available_versions(model_dir))
        if opts.auto_complete:
            # Off the loop: it opens the model file (big models take seconds).
            with version_error(max(versions)):
                cfg = await asyncio.to_thread(
                    self._module().auto_complete, cfg, model_dir, max(versions), mbs
                )
        validate_config(cfg, gpus)
        return PreparedModel(cfg, versions)

    async def create_instances(
        self,
        model: PreparedModel,
        model_dir: str,
        version: int,
        opts: LoadOptions,
        host: ModelHost | None,
    ) -> list[Instance]:
        with version_error(version):
            instances: list[Instance] = await asyncio.to_thread(
                self._module().create_instances, model.config, model_dir, version
            )
        return instances

    async def discard(self, model: PreparedModel) -> None:
        return None


ONNXRUNTIME = TensorBackend("onnxruntime", "modelyard.backends.onnxruntime")
PYTORCH = TensorBackend("pytorch", "modelyard.backends.pytorch")
