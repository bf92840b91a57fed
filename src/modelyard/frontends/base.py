"""What the composition root asks of every frontend it starts."""

from __future__ import annotations

from typing import Protocol


class Frontend(Protocol):
    """A started endpoint (HTTP, gRPC, metrics, OpenAI, SageMaker, Vertex AI)."""

    async def close(self, grace: float = 1.0) -> None:
        """Stop listening; let requests in flight finish for up to ``grace`` seconds."""
        ...
