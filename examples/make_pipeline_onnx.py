"""Generate examples/model_repository/signal_classifier/1/model.onnx (needs ``pip install onnx``).

A linear layer and a softmax: FEATURES [batch, 4] = (mean, std, min, max) of a signal ->
SCORES [batch, 3] for the classes low / mid / high. The mean pulls towards low (around 0) or
high (around 1); a wide min..max range pulls towards mid, so a noisy signal scores uncertain
until the pipeline smooths it. The generated file is committed; this script documents it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = (
    Path(__file__).resolve().parent / "model_repository" / "signal_classifier" / "1" / "model.onnx"
)

# Columns: low, mid, high. Rows: mean, std, min, max.
WEIGHTS = np.array([[-6.0, 0.0, 6.0],    # the mean decides between low and high
                    [0.0, 0.0, 0.0],
                    [0.0, -1.5, 0.0],    # 1.5 * (max - min) goes to mid
                    [0.0, 1.5, 0.0]],
                   dtype=np.float32)  # fmt: skip
BIAS = np.array([3.0, 0.0, -3.0], dtype=np.float32)


def main() -> None:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["FEATURES", "W"], ["logits_raw"]),
         helper.make_node("Add", ["logits_raw", "B"], ["logits"]),
         helper.make_node("Softmax", ["logits"], ["SCORES"], axis=1)],
        "signal_classifier",
        [helper.make_tensor_value_info("FEATURES", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("SCORES", TensorProto.FLOAT, ["batch", 3])],
        initializer=[numpy_helper.from_array(WEIGHTS, "W"), numpy_helper.from_array(BIAS, "B")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(OUT))
    print("wrote", OUT)


if __name__ == "__main__":
    main()
