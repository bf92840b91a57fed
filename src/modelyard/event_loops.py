"""Which event loop modelyard's own loops run on: uvloop, unless ``MODELYARD_EVENT_LOOP=asyncio``
asks for asyncio's (to tell a uvloop problem from ours) or uvloop is not installed. The
server's loop and an in-process model's loop of its own follow the same setting."""

from __future__ import annotations

import asyncio
import os

VARIABLE = "MODELYARD_EVENT_LOOP"


def wants_uvloop() -> bool:
    return os.environ.get(VARIABLE, "uvloop") == "uvloop"


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new loop of the chosen kind."""
    if wants_uvloop():
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()
