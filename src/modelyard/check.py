"""``modelyard check REPOSITORY``: would every model load?

Each model goes through what loading does, with the server's own code: the config is parsed,
normalised and validated; a Python model's ``model.py`` is imported in a separate process
(a worker, as the server starts one) and its ``auto_complete_config`` runs; ONNX Runtime and
TorchScript models are loaded (no model code runs there); an ensemble's steps must be models
of the repository. With ``--load`` each model is loaded as ``serve`` loads it, its
``initialize`` included, then unloaded (``finalize``).

One line per model, ``ok`` or ``FAILED`` with the file, line and source line of the mistake;
exit code 1 when any model is broken, 2 when the repository cannot be read.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from modelyard import logs
from modelyard.backends.loader import LoadOptions
from modelyard.config.normalize import normalize_config
from modelyard.config.repository import ModelLocation, scan_repositories
from modelyard.config.validate import validate_config
from modelyard.core.api import InferenceServer
from modelyard.core.ensembles import ensembles_last
from modelyard.core.loader import check_versions, read_config
from modelyard.core.options import ServerOptions
from modelyard.error_location import describe
from modelyard.errors import ModelyardError, VersionLoadError
from modelyard.scheduling.ensemble import steps_from_config

log = logging.getLogger("modelyard")


@dataclass
class Result:
    name: str
    error: str | None = None  # None: the model is fine

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class CheckConfig:
    """``modelyard check``'s command line, typed."""

    repository: Path
    config_name: str  # --model-config-name ("" for none)
    backend_settings: dict[str, dict[str, str]]  # --backend-config, by backend
    load: bool  # --load: initialize and finalize each model too
    verbose: bool  # -v: the server's log on stderr


def run_check(config: CheckConfig) -> int:
    verbose = config.verbose
    logs.configure(logs.LogConfig(log_info=verbose, log_warning=verbose, log_error=verbose))
    opts = LoadOptions(backend_settings=config.backend_settings, config_name=config.config_name)
    try:
        results = asyncio.run(check_repository(config.repository, opts, config.load))
    except ModelyardError as e:  # the repository itself cannot be read
        print(f"modelyard check: error: {e.message}", file=sys.stderr)
        return 2
    report(results, sys.stdout)
    return 0 if all(r.ok for r in results) else 1


def report(results: list[Result], out: TextIO) -> None:
    width = max((len(r.name) for r in results), default=0)
    for r in results:
        if r.error is None:
            out.write(f"ok      {r.name}\n")
            continue
        lines = describe(r.error, indent="")
        out.write(f"FAILED  {r.name:<{width}}  {lines[0]}\n")
        for line in lines[1:]:
            out.write(f"        {'':<{width}}  {line}\n")
    failed = sum(1 for r in results if not r.ok)
    out.write(f"{len(results)} model(s): {len(results) - failed} ok, {failed} failed\n")


async def check_repository(repository: Path, opts: LoadOptions, load: bool) -> list[Result]:
    """Check every model of ``repository`` (see the module's doc); ConfigError when the
    repository cannot be read."""
    found = scan_repositories([repository])
    if load:
        return await _load_all(repository, opts, sorted(found))
    return [await check_model(loc, opts, found) for loc in found.values()]


async def check_model(
    loc: ModelLocation, opts: LoadOptions, found: dict[str, ModelLocation]
) -> Result:
    """Everything loading does before a model's instances start (see the module's doc)."""
    name, model_dir = loc.name, str(loc.path)
    if not loc.loadable:
        return Result(name, str(loc.error))
    try:
        cfg = read_config(name, model_dir, None, opts.config_name)
        if cfg.platform == "ensemble":
            cfg = normalize_config(cfg, name, model_dir=model_dir)
            validate_config(cfg)
            missing = sorted({s.model for s in steps_from_config(cfg)} - set(found))
            if missing:
                raise ModelyardError(
                    f"ensemble {name} contains models that are not available or ambiguous: "
                    f"{', '.join(missing)}"
                )
        else:
            await check_versions(name, model_dir, cfg, opts)
    except VersionLoadError as e:
        return Result(name, e.reason)
    except ModelyardError as e:
        return Result(name, e.message)
    return Result(name, None)


async def _load_all(repository: Path, opts: LoadOptions, names: list[str]) -> list[Result]:
    """``--load``: load every model as ``serve`` does (steps before ensembles), then stop."""
    core = InferenceServer(ServerOptions(repositories=[str(repository)], load=opts))
    core.registry.scan()
    errors: dict[str, str] = {}
    try:
        for group in ensembles_last(core.registry.locations, names):
            outcomes = await asyncio.gather(*(core.load(n) for n in group), return_exceptions=True)
            for name, outcome in zip(group, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    entry = core.registry.entries.get(name)
                    reason = entry.reason if entry is not None and entry.reason else None
                    message = getattr(outcome, "message", None) or str(outcome)
                    errors[name] = reason or message
    finally:
        await core.stop()
    return [Result(n, errors.get(n)) for n in names]
