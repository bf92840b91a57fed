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


def test_segments_of_dead_servers_are_swept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server killed with SIGKILL leaves its segments; the next one removes them, never a
    live server's."""
    import subprocess
    import sys

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid is no process now
    monkeypatch.setattr(shm, "SHM_DIR", str(tmp_path))
    monkeypatch.setattr(shm, "_swept_dead", False)
    for name in (f"modelyard-{gone.pid}-1-s-1", f"modelyard-{gone.pid}-2-w-1",
                 "modelyard-1-1-s-1", "modelyard-inbox-x", "other-1"):  # fmt: skip
        (tmp_path / name).write_bytes(b"")
    shm.sweep_dead_servers()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "modelyard-1-1-s-1",  # pid 1 lives
        "modelyard-inbox-x",
        "other-1",
    ]
