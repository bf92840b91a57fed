"""A stopped worker removes its own shared-memory segments, never those of a worker whose id
starts with the same digits (worker 1 must not sweep worker 12's segments)."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelyard.backends.python.protocol import tensor_pool as shm
from modelyard.backends.python.server.process_instance import PythonWorker, WorkerSpec


async def test_stop_sweeps_only_its_own_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shm, "SHM_DIR", str(tmp_path))
    spec = WorkerSpec(model_name="m", version=1, model_dir=str(tmp_path), model_file="model.py",
                      instance_name="m_0", instance_kind="CPU", device_id=0, config_json="{}",
                      decoupled=False)  # fmt: skip
    worker = PythonWorker(spec)
    worker._prefix = "modelyard-99-1"
    (tmp_path / "modelyard-99-1-s0").write_bytes(b"")  # its own (server side)
    (tmp_path / "modelyard-99-1-w0").write_bytes(b"")  # its own (worker side)
    (tmp_path / "modelyard-99-12-s0").write_bytes(b"")  # worker 12's
    await worker.stop()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["modelyard-99-12-s0"]
