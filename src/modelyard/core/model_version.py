"""A loaded model version: what requests run on."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from modelyard.backends.instance import Instance
from modelyard.core.validation import ModelSignature
from modelyard.scheduling.base import Scheduler
from modelyard.serving.stats import ModelStats


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
