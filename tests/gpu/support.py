"""What the GPU suite needs, and the skip that names what is missing.

Every test in tests/gpu is marked ``gpu`` and skipped unless this machine has an NVIDIA GPU
that modelyard finds (``modelyard.devices``: cuda-python or nvidia-ml-py, a driver, a device)
and torch built with CUDA that can use it (the test models run torch on the GPU).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from modelyard.devices import discover_gpus

MODELS = Path(__file__).resolve().parent / "models"


def missing() -> str | None:
    """Why the GPU suite cannot run here, or None when it can."""
    found = discover_gpus()
    if not found.devices:
        return f"no GPU found by modelyard: {found.reason}"
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return "torch is not installed (the GPU test models use torch with CUDA)"
    if getattr(torch.version, "cuda", None) is None:
        return f"torch {torch.__version__} is built without CUDA"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} cannot use the GPU (torch.cuda.is_available() is False)"
    return None


REASON = missing()
# pytestmark of every GPU test module: the marker, and the skip naming what is missing.
GPU = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"GPU suite: {REASON}")]
