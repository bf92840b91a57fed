"""A loaded model version (what requests run on) and the options models load with."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from modelyard.backends.instance import Instance
from modelyard.backends.python.server.backend import PythonBackendOptions
from modelyard.core.validation import ModelSignature
from modelyard.scheduling.base import Scheduler
from modelyard.serving.stats import ModelStats


@dataclass
class LoadOptions:
    auto_complete: bool = True
    backend_settings: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def python(self) -> PythonBackendOptions:
        return PythonBackendOptions.from_settings(self.backend_settings.get("python", {}))


@dataclass(eq=False)
class ModelVersion:
    name: str
    version: int
    config: Any  # model_config_pb2.ModelConfig, normalized
    config_json: str
    signature: ModelSignature
    decoupled: bool
    instances: list[Instance]
    scheduler: Scheduler
    stats: ModelStats

    @property
    def platform(self) -> str:
        return str(self.config.platform or self.config.backend)

    async def stop(self, drain_timeout: float) -> None:
        await self.scheduler.drain(drain_timeout)
        await asyncio.gather(*(i.stop() for i in self.instances), return_exceptions=True)
