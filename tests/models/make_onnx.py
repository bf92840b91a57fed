"""Generate the small ONNX models the tests use (run: python tests/models/make_onnx.py).

The generated ``model.onnx`` files are committed, so the tests need onnxruntime only; this
script needs the ``onnx`` package. Opset 13 and IR version 8 keep the files loadable by old
and new onnxruntime releases alike.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

HERE = Path(__file__).resolve().parent


def _save(graph: onnx.GraphProto, model_dir: str) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    out = HERE / model_dir / "1" / "model.onnx"
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out))
    print("wrote", out.relative_to(HERE))


def add_sub(model_dir: str) -> None:
    """INPUT0, INPUT1 FP32 [batch, 4] -> OUTPUT0 = sum, OUTPUT1 = difference."""
    shape = ["batch", 4]
    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
         helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])],
        "add_sub",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, shape),
         helper.make_tensor_value_info("INPUT1", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, shape),
         helper.make_tensor_value_info("OUTPUT1", TensorProto.FLOAT, shape)],
    )  # fmt: skip
    _save(graph, model_dir)


def double_fixed(model_dir: str) -> None:
    """x INT32 [2, 3] (no batch dimension) -> y = x + x."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y"])],
        "double_fixed",
        [helper.make_tensor_value_info("x", TensorProto.INT32, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [2, 3])],
    )
    _save(graph, model_dir)


def string_identity(model_dir: str) -> None:
    """TEXT STRING [batch, 2] -> SAME = TEXT (BYTES through ONNX Runtime string tensors)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["TEXT"], ["SAME"])],
        "string_identity",
        [helper.make_tensor_value_info("TEXT", TensorProto.STRING, ["batch", 2])],
        [helper.make_tensor_value_info("SAME", TensorProto.STRING, ["batch", 2])],
    )
    _save(graph, model_dir)


if __name__ == "__main__":
    add_sub("onnx_add_sub")
    add_sub("onnx_auto")
    double_fixed("onnx_fixed")
    string_identity("onnx_strings")
