"""A recording Runtime for the tests (pb_utils' own hook, not a server component)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import triton_python_backend_utils as pb

Handler = Callable[[pb.InferenceRequest], list[pb.InferenceResponse]]


class FakeRuntime:
    def __init__(self, handler: Handler | None = None, model_dir: str = "/repo/m/1") -> None:
        self.handler = handler or (lambda request: [pb.InferenceResponse([])])
        self.calls: list[tuple[pb.InferenceRequest, bool]] = []
        self.logs: list[tuple[int, str, str, int]] = []
        self.control: list[tuple[Any, ...]] = []
        self.ready = True
        self._model_dir = model_dir

    def exec(
        self, request: pb.InferenceRequest, decoupled: bool
    ) -> pb.InferenceResponse | Iterator[pb.InferenceResponse]:
        self.calls.append((request, decoupled))
        responses = self.handler(request)
        if decoupled:
            return iter(responses)
        return responses[-1]

    def async_exec(self, request: pb.InferenceRequest, decoupled: bool) -> Any:
        async def run() -> Any:
            return self.exec(request, decoupled)

        return run()

    def log(self, level: int, message: str, filename: str, line: int) -> None:
        self.logs.append((level, message, filename, line))

    def load_model(self, name: str, config: str, files: dict[str, bytes] | None) -> None:
        self.control.append(("load", name, config, files))

    def unload_model(self, name: str, unload_dependents: bool) -> None:
        self.control.append(("unload", name, unload_dependents))

    def is_model_ready(self, name: str, version: str) -> bool:
        self.control.append(("ready", name, version))
        return self.ready

    def model_dir(self) -> str:
        return self._model_dir


class RecordingDeliver:
    """A response sender's delivery callable that records what it is given."""

    def __init__(self) -> None:
        self.sent: list[tuple[pb.InferenceResponse | None, int]] = []

    def __call__(self, response: pb.InferenceResponse | None, flags: int) -> None:
        self.sent.append((response, flags))
