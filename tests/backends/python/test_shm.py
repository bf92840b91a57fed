"""The shared-memory tensor pool: reuse, release on last view, and inline fallback."""

from __future__ import annotations

import gc
import os

import numpy as np

from modelyard.backends.python.protocol import tensor_pool as shm


def test_large_tensor_goes_through_a_segment_and_is_reused(tmp_path: object) -> None:
    pool = shm.ShmPool(f"modelyard-test-{os.getpid()}")
    released: list[str] = []
    mapper = shm.ShmMapper(released.append)
    try:
        arr = np.arange(100_000, dtype=np.float32)
        packed = pack = shm.pack("X", "FP32", arr, pool)
        assert isinstance(pack[3], tuple)  # a segment reference, not inline bytes
        _name, dt, view = shm.unpack(packed, mapper)
        assert (view == arr).all() and dt == "FP32"
        seg_name = pack[3][0]
        del view
        gc.collect()
        assert released == [seg_name]  # the last view going away releases the block
        pool.release(released)
        again = shm.pack("Y", "FP32", arr * 2, pool)
        assert again[3][0] == seg_name  # the same segment serves the next tensor
    finally:
        pool.close()
    assert not [n for n in os.listdir(shm.SHM_DIR) if n.startswith(f"modelyard-test-{os.getpid()}")]


def test_small_and_bytes_tensors_travel_inline() -> None:
    pool = shm.ShmPool(f"modelyard-test-{os.getpid()}-b")
    small = np.ones(4, dtype=np.float32)
    assert shm.pack("S", "FP32", small, pool)[3] == small.tobytes()
    strings = np.array([b"x" * 100_000], dtype=np.object_)
    assert shm.pack("B", "BYTES", strings, pool)[3] is strings
    pool.close()


def test_missing_shm_dir_degrades_to_inline(monkeypatch: object) -> None:
    import pytest

    mp = pytest.MonkeyPatch()
    mp.setattr(shm, "SHM_DIR", "/nonexistent-shm-dir")
    try:
        pool = shm.ShmPool("modelyard-test-none")
        assert not pool.enabled
        arr = np.zeros(1_000_000, dtype=np.uint8)
        assert type(shm.pack("X", "UINT8", arr, pool)[3]) is bytes
    finally:
        mp.undo()


def test_full_shm_degrades_to_inline() -> None:
    pool = shm.ShmPool(f"modelyard-test-{os.getpid()}-c", limit_bytes=1 << 20)
    big = np.zeros(4 << 20, dtype=np.uint8)  # over the pool's limit
    assert type(shm.pack("X", "UINT8", big, pool)[3]) is bytes
    pool.close()


def test_a_gpu_tensors_host_copy_is_marked_with_its_device() -> None:
    """Process mode: a model's GPU tensor travels as its host copy marked with its device, so
    the model receiving it can have it on that GPU again; the segment under the mark is
    still tracked (and freed) as any other."""
    import msgspec

    pool = shm.ShmPool(f"modelyard-test-{os.getpid()}-g")
    released: list[str] = []
    mapper = shm.ShmMapper(released.append)
    try:
        for arr in (np.arange(4, dtype=np.float32), np.arange(100_000, dtype=np.float32)):
            plain = shm.pack("X", "FP32", arr, pool)
            marked = shm.on_gpu(plain, 3)
            # (through a frame, as between the processes: tuples become lists)
            wire = msgspec.msgpack.decode(msgspec.msgpack.encode(marked))
            assert (shm.gpu_of(wire), shm.gpu_of(plain)) == (3, None)
            _name, dt, view = shm.unpack(wire, mapper)
            assert dt == "FP32" and (view == arr).all()
            plain_wire = msgspec.msgpack.decode(msgspec.msgpack.encode(plain))
            assert shm.segments([wire]) == shm.segments([plain_wire])
            assert len(shm.segments([wire])) == (arr.nbytes >= shm.INLINE_LIMIT)
    finally:
        pool.close()
