"""What loading asks of a backend, and the table of backends by name.

Loading a model is one pipeline (``core/loader.py``): read the config, look the backend up here
by the config's ``backend`` / ``platform``, let it ``prepare`` the config (normalise,
auto-complete, validate) and ``create_instances`` for each version, then the core starts them,
warms them up and puts the one scheduler the config asks for in front. A backend is an object
with the three methods of :class:`Backend`; it registers under its names with :func:`register`
(the built-in ones are imported on first use, so ``import modelyard`` loads no model runtime).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from modelyard.backends.instance import Instance
from modelyard.config.placement import SupportedGpus
from modelyard.errors import Unsupported
from modelyard.serving.host import ModelHost


@dataclass(frozen=True)
class LoadOptions:
    """What every load reads: auto-complete on or off, ``--backend-config`` by backend,
    ``--model-config-name`` (``configs/<name>.pbtxt`` before ``config.pbtxt``),
    ``--model-load-retry-count`` (more tries for a version whose instances fail to start) and
    the GPUs instances may be placed on (``None``: this machine's that meet Triton's default
    minimum compute capability; the server passes those of
    ``--min-supported-compute-capability``)."""

    auto_complete: bool = True
    backend_settings: dict[str, dict[str, str]] = field(default_factory=dict)
    config_name: str = ""
    retry_count: int = 0
    gpus: SupportedGpus | None = None

    def settings(self, backend: str) -> dict[str, str]:
        return self.backend_settings.get(backend, {})

    def supported_gpus(self) -> SupportedGpus:
        if self.gpus is not None:
            return self.gpus
        from modelyard.devices import supported_gpus

        return supported_gpus()


@dataclass
class PreparedModel:
    """A model's config as it will serve (normalised, auto-completed, validated), the versions
    its policy selects, and what the backend keeps between ``prepare`` and the instances (the
    Python backend: the model's environment and the worker that ran auto-complete)."""

    config: Any  # model_config_pb2.ModelConfig
    versions: list[int]
    state: Any = None


class Backend(Protocol):
    """A backend as the loading pipeline drives it."""

    # Whether ``prepare`` runs the model's own code (a Python model's ``auto_complete_config``).
    # ``modelyard check`` creates the instances of a backend that does not, to check the config
    # against the model file as loading would.
    runs_model_code: bool

    async def prepare(
        self,
        name: str,
        model_dir: str,
        cfg: Any,
        opts: LoadOptions,
        host: ModelHost | None,
        isolate: bool = False,
    ) -> PreparedModel:
        """The config as it will serve and the versions to load; ``isolate``: run any model
        code in a separate process (``check``)."""
        ...

    async def create_instances(
        self,
        model: PreparedModel,
        model_dir: str,
        version: int,
        opts: LoadOptions,
        host: ModelHost | None,
    ) -> list[Instance]:
        """The version's instances, not started yet; errors name the version as Triton does."""
        ...

    async def discard(self, model: PreparedModel) -> None:
        """Free what ``prepare`` kept that no instance took (after a failure, or ``check``)."""
        ...


SUPPORTED = ("python", "onnxruntime", "pytorch")
# Built-in backends, imported on first use: backend name -> "module:attribute".
_BUILTIN = {
    "python": "modelyard.backends.python.server.backend:BACKEND",
    "onnxruntime": "modelyard.backends.tensor_loader:ONNXRUNTIME",
    "pytorch": "modelyard.backends.tensor_loader:PYTORCH",
}
# Platforms that name a backend (Triton's older ``platform:`` field).
PLATFORMS = {"onnxruntime_onnx": "onnxruntime", "pytorch_libtorch": "pytorch"}
_registered: dict[str, Backend] = {}


def register(name: str, backend: Backend | Callable[[], Backend]) -> None:
    """Serve models whose config says ``backend: "<name>"`` with ``backend`` (or what the
    callable returns, built on first use)."""
    _registered[name] = backend() if callable(backend) else backend


def backend_name(cfg: Any) -> str:
    """The backend a config names, by ``backend`` or else by ``platform``."""
    return str(cfg.backend or PLATFORMS.get(cfg.platform, ""))


def backend_for(cfg: Any) -> Backend:
    """The backend that serves ``cfg``; Unsupported, naming the model, when there is none."""
    name = backend_name(cfg)
    backend = _registered.get(name)
    if backend is None and name in _BUILTIN:
        module, attr = _BUILTIN[name].split(":")
        backend = _registered[name] = getattr(importlib.import_module(module), attr)
    if backend is None:
        supported = ", ".join(dict.fromkeys([*SUPPORTED, *_registered]))
        raise Unsupported(
            f"model '{cfg.name}': backend '{cfg.backend or cfg.platform or 'unknown'}' is not "
            f"supported by this server (supported: {supported})"
        )
    return backend
