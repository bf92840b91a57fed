"""The classification extension's formatting (Triton's classification.cc rules)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from modelyard.errors import ModelyardError
from modelyard.frontends.classify import classify, read_labels
from modelyard.types import Tensor


def test_top_k_of_a_batched_float_output_with_labels() -> None:
    scores = np.array([[0.1, 3.3, 0.2, 1.0], [5, 1, 2, 7]], np.float32)
    out = classify(Tensor.from_numpy("O", scores), 2, batching=True, labels=["a", "b", "", "d"])
    assert (out.name, out.datatype, out.shape) == ("O", "BYTES", (2, 2))
    assert out.data is not None
    assert out.data.tolist() == [[b"3.300000:1:b", b"1.000000:3:d"],
                                 [b"7.000000:3:d", b"5.000000:0:a"]]  # fmt: skip


def test_k_is_clipped_and_integers_print_plainly() -> None:
    out = classify(Tensor.from_numpy("O", np.array([5, 9, 1], np.int32)), 10, batching=False)
    assert out.shape == (3,)
    assert out.data is not None and out.data.tolist() == [b"9:1", b"5:0", b"1:2"]


def test_ties_keep_the_lower_index_first_and_missing_labels_are_skipped() -> None:
    out = classify(Tensor.from_numpy("O", np.array([1.0, 2.0, 2.0], np.float64)), 3, False, ["x"])
    assert out.data is not None
    assert out.data.tolist() == [b"2.000000:1", b"2.000000:2", b"1.000000:0:x"]


def test_raw_outputs_are_decoded() -> None:
    raw = np.array([0.5, 0.25], np.float32).tobytes()
    out = classify(Tensor("O", "FP32", (2,), raw=raw), 1, batching=False)
    assert out.data is not None and out.data.tolist() == [b"0.500000:0"]


def test_bytes_outputs_cannot_be_classified() -> None:
    with pytest.raises(ModelyardError) as exc:
        classify(Tensor.from_numpy("O", np.array([b"a"], dtype=np.object_)), 1, False)
    assert "class result not available for output 'O'" in exc.value.message


def test_label_files_are_read_and_reread_when_changed(tmp_path: Path) -> None:
    path = tmp_path / "labels.txt"
    path.write_text("cat\ndog\n")
    assert read_labels(path) == ["cat", "dog"]
    path.write_text("cow\n")
    os.utime(path, ns=(1, 1))
    assert read_labels(path) == ["cow"]
    assert read_labels(tmp_path / "missing.txt") is None
