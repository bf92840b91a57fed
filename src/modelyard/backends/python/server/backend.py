"""The Python backend: prepares a model's config (auto-complete in the model's first worker)
and creates its instances, in worker processes or in-process."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from dataclasses import dataclass, field, replace
from typing import Any

from modelyard.backends.instance import Instance
from modelyard.backends.loader import LoadOptions, PreparedModel
from modelyard.backends.python.protocol.model_calls import Failure, gpu_inputs
from modelyard.backends.python.server import exec_env
from modelyard.backends.python.server.process_instance import PythonWorker, WorkerSpec
from modelyard.backends.python.server.restart import RestartPolicy
from modelyard.config.normalize import normalize_config
from modelyard.config.placement import instance_placements
from modelyard.config.render import config_to_json
from modelyard.config.repository import available_versions, select_versions
from modelyard.config.validate import validate_config
from modelyard.errors import ConfigError, ErrorCode, ModelyardError, VersionLoadError
from modelyard.serving.host import ModelHost

log = logging.getLogger("modelyard")


@dataclass
class PythonBackendOptions:
    """`--backend-config python,KEY=VALUE` settings that apply here."""

    default_max_batch_size: int = 4
    shm_enabled: bool = True
    python: str = sys.executable
    init_timeout: float = 600.0
    execution_mode: str = "process"  # or "in-process"
    restart: RestartPolicy = field(default_factory=RestartPolicy)

    @classmethod
    def from_settings(cls, settings: dict[str, str]) -> PythonBackendOptions:
        opts = cls()
        if "default-max-batch-size" in settings:
            opts.default_max_batch_size = int(settings["default-max-batch-size"])
        if settings.get("shm-enabled", "true").lower() in ("false", "0", "no"):
            opts.shm_enabled = False
        if "python" in settings:
            opts.python = settings["python"]
        if "execution-mode" in settings:
            opts.execution_mode = _check_mode(
                settings["execution-mode"], "--backend-config python,execution-mode"
            )
        if "init-timeout-seconds" in settings:
            opts.init_timeout = float(settings["init-timeout-seconds"])
        initial = _seconds(settings, "restart-backoff-seconds", opts.restart.initial)
        maximum = _seconds(
            settings, "restart-backoff-max-seconds", max(initial, opts.restart.maximum)
        )
        opts.restart = RestartPolicy(initial=initial, maximum=maximum)
        return opts


def _seconds(settings: dict[str, str], key: str, default: float) -> float:
    if key not in settings:
        return default
    try:
        value = float(settings[key])
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise ConfigError(
            f"--backend-config python,{key}: expected a number of seconds >= 0, "
            f"got '{settings[key]}'"
        )
    return value


MODES = ("process", "in-process")

# Triton 25.09+ refuses to start a Python stub whose name (the model's name for auto-complete,
# else the instance's) holds any of these shell metacharacters (python_backend INVALID_CHARS).
STUB_NAME_INVALID_CHARS = frozenset(";|&$`<>()[]{}\\\"'*?~#!")


def check_stub_name(name: str, version: int) -> None:
    """Refuse a model or instance name as Triton refuses it (in both execution modes, so a
    repository that loads here loads on Triton too)."""
    if not name or STUB_NAME_INVALID_CHARS.intersection(name):
        raise VersionLoadError(
            version, "Invalid stub name: contains invalid characters", ErrorCode.INVALID_ARG
        )


def _check_mode(mode: str, where: str) -> str:
    if mode not in MODES:
        raise ConfigError(
            f"{where}: unknown execution mode '{mode}' (expected one of: {', '.join(MODES)})"
        )
    return mode


def execution_mode(cfg: Any, opts: PythonBackendOptions) -> str:
    """Per model (config parameter MODELYARD_EXECUTION_MODE) or server-wide; a model with
    an EXECUTION_ENV_PATH runs in worker processes (an in-process model shares the server's
    interpreter and packages)."""
    param = cfg.parameters.get("MODELYARD_EXECUTION_MODE") if cfg.parameters else None
    has_env = exec_env.PARAMETER in cfg.parameters if cfg.parameters else False
    if param is not None and param.string_value:
        mode = _check_mode(
            param.string_value, f"model '{cfg.name}' parameter MODELYARD_EXECUTION_MODE"
        )
        if mode == "in-process" and has_env:
            raise ConfigError(
                f"model '{cfg.name}': MODELYARD_EXECUTION_MODE 'in-process' cannot be combined "
                f"with {exec_env.PARAMETER}: a model in its own Python environment runs in "
                "worker processes"
            )
        return mode
    return "process" if has_env else opts.execution_mode


async def prepare_exec_env(
    cfg: Any, model_dir: str, version: int, opts: PythonBackendOptions
) -> exec_env.ExecEnv | None:
    """The model's EXECUTION_ENV_PATH environment, extracted and checked (None when unset)."""
    path = exec_env.configured_path(cfg.parameters, model_dir)
    if not path:
        return None
    if cfg.parameters.get("MODELYARD_PYTHON") is not None:
        raise ConfigError(
            f"model '{cfg.name}': set either {exec_env.PARAMETER} or MODELYARD_PYTHON, not both"
        )
    log.info("Using Python execution env %s", path)
    if opts.execution_mode == "in-process":
        log.warning(
            "model '%s' has its own Python environment (%s): its instances run in worker "
            "processes, not in-process",
            cfg.name,
            exec_env.PARAMETER,
        )
    try:
        return await asyncio.to_thread(exec_env.MANAGER.prepare, path)
    except exec_env.EnvError as e:
        raise VersionLoadError(version, str(e), ErrorCode.INTERNAL) from None


def model_file(model_dir: str, version: int, cfg: Any) -> str:
    filename = cfg.default_model_filename or "model.py"
    return os.path.join(model_dir, str(version), filename)


def _python_for(cfg: Any, opts: PythonBackendOptions) -> str:
    # Per-model interpreter, like Triton's EXECUTION_ENV_PATH but naming a Python directly.
    param = cfg.parameters.get("MODELYARD_PYTHON") if cfg.parameters else None
    return param.string_value if param is not None and param.string_value else opts.python


def _pipeline(cfg: Any) -> bool:
    """Config parameter MODELYARD_PIPELINE: "false" turns off staging a queued request in a
    busy worker (see ``PythonWorker.can_stage``)."""
    param = cfg.parameters.get("MODELYARD_PIPELINE") if cfg.parameters else None
    if param is None or not param.string_value:
        return True
    value: str = param.string_value.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(
            f"model '{cfg.name}' parameter MODELYARD_PIPELINE: expected true or false, "
            f"got '{param.string_value}'"
        )
    return value == "true"


def _spec(
    cfg: Any,
    model_dir: str,
    version: int,
    instance_name: str,
    kind: str,
    opts: PythonBackendOptions,
    config_json: str,
    env: exec_env.ExecEnv | None = None,
) -> WorkerSpec:
    return WorkerSpec(
        model_name=cfg.name,
        version=version,
        model_dir=model_dir,
        model_file=model_file(model_dir, version, cfg),
        instance_name=instance_name,
        instance_kind=kind,
        device_id=0,
        config_json=config_json,
        decoupled=bool(cfg.model_transaction_policy.decoupled),
        python=_python_for(cfg, opts),
        shm_enabled=opts.shm_enabled,
        init_timeout=opts.init_timeout,
        pipeline=_pipeline(cfg),
        restart=opts.restart,
        exec_env=env,
    )


async def run_auto_complete(
    cfg: Any,
    model_dir: str,
    version: int,
    opts: PythonBackendOptions,
    host: ModelHost | None,
    env: exec_env.ExecEnv | None = None,
    isolate: bool = False,
) -> tuple[Any, PythonWorker | None]:
    """Run the model's ``auto_complete_config`` in a fresh worker (in this process for an
    in-process model, unless ``isolate``).

    Returns the completed config and the worker, which becomes the model's first instance.
    """
    from modelyard.config.auto_complete import (
        config_from_autocomplete_dict,
        config_to_autocomplete_dict,
    )

    check_stub_name(cfg.name, version)
    spec = _spec(cfg, model_dir, version, f"{cfg.name}_autocomplete", "CPU", opts, "{}", env)
    if execution_mode(cfg, opts) == "in-process" and not isolate:
        from modelyard.backends.python.server.isolation import auto_complete_in_process

        completed = await auto_complete_in_process(
            spec.model_file, cfg.name, config_to_autocomplete_dict(cfg)
        )
        return config_from_autocomplete_dict(completed, base=cfg), None
    worker = PythonWorker(spec, host)
    try:
        await worker.spawn()
        completed = await worker.autocomplete(config_to_autocomplete_dict(cfg))
        new_cfg = config_from_autocomplete_dict(completed, base=cfg)
    except Exception:
        await worker.stop()
        raise
    return new_cfg, worker


def create_instances(
    cfg: Any,
    model_dir: str,
    version: int,
    opts: PythonBackendOptions,
    host: ModelHost | None,
    first: PythonWorker | None = None,
    env: exec_env.ExecEnv | None = None,
) -> list[Instance]:
    """One worker per instance, named and placed as Triton does (``config/placement.py``).
    A GPU instance is only told its device (``model_instance_device_id``): the model picks
    it, with every GPU of the process visible, as under Triton."""
    config_json = config_to_json(cfg)
    try:
        gpu_inputs(json.loads(config_json))  # (Triton's check of the value, at load)
    except Failure as f:
        raise ModelyardError(f.message, f.code) from None
    mode = execution_mode(cfg, opts)
    instances: list[Instance] = []
    for placement in instance_placements(cfg):
        check_stub_name(placement.name, version)
        spec = replace(
            _spec(cfg, model_dir, version, placement.name, placement.kind, opts, config_json, env),
            device_id=placement.device_id,
            instance_key=placement.key,
        )
        if mode == "in-process":
            from modelyard.backends.python.server.inprocess import InProcessInstance

            if host is None:
                raise ConfigError(f"model '{cfg.name}': in-process instances need a host")
            instances.append(InProcessInstance(spec, host))
        elif first is not None:
            first.adopt(spec)
            instances.append(first)
            first = None
        else:
            instances.append(PythonWorker(spec, host))
    if not instances:
        raise ConfigError(f"model '{cfg.name}' has no instances to run")
    return instances


@dataclass
class _Prepared:
    """What prepare keeps for the instances: the model's environment and the worker that ran
    ``auto_complete_config`` (it becomes the first instance of the newest version)."""

    env: exec_env.ExecEnv | None
    first: PythonWorker | None


class PythonBackend:
    """The Python backend as the loading pipeline drives it."""

    runs_model_code = True

    async def prepare(
        self,
        name: str,
        model_dir: str,
        cfg: Any,
        opts: LoadOptions,
        host: ModelHost | None,
        isolate: bool = False,
    ) -> PreparedModel:
        """Normalised, auto-completed by the model (in the worker that becomes the first
        instance; ``isolate``: always in a worker process), normalised again and validated.
        The model's own failures (a ``model.py`` that does not import) fail the latest
        version, as Triton reports them."""
        py = PythonBackendOptions.from_settings(opts.settings("python"))
        gpus = opts.supported_gpus()

        def normalize(cfg: Any, auto_complete: bool) -> Any:
            return normalize_config(
                cfg,
                name,
                model_dir=model_dir,
                backend_default_max_batch_size=py.default_max_batch_size,
                auto_complete=auto_complete,
                gpus=gpus,
            )

        cfg = normalize(cfg, opts.auto_complete)
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
                cfg = normalize(cfg, True)
            validate_config(cfg, gpus)
        except BaseException:
            if first is not None:
                await first.stop()
            raise
        return PreparedModel(cfg, versions, _Prepared(env, first))

    async def create_instances(
        self,
        model: PreparedModel,
        model_dir: str,
        version: int,
        opts: LoadOptions,
        host: ModelHost | None,
    ) -> list[Instance]:
        state: _Prepared = model.state
        py = PythonBackendOptions.from_settings(opts.settings("python"))
        first, state.first = state.first, None
        try:
            return create_instances(model.config, model_dir, version, py, host, first, state.env)
        except BaseException:
            if first is not None:
                await first.stop()
            raise

    async def discard(self, model: PreparedModel) -> None:
        state: _Prepared = model.state
        first, state.first = state.first, None
        if first is not None:
            await first.stop()


BACKEND = PythonBackend()
