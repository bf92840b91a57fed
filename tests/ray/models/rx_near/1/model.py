import json
import os

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUTPUT0: INPUT0, repeated to the request parameter "size" when it has one."""

    def execute(self, requests):
        node = np.array([os.environ.get("RAY_RAYLET_PID", "").encode()], dtype=object)
        responses = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            size = json.loads(r.parameters()).get("size")
            out = np.resize(x, int(size)) if size else x
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUTPUT0", out), pb_utils.Tensor("NODE", node)]
                )
            )
        return responses
