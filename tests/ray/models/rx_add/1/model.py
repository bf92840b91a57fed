import json
import os

import numpy as np

import triton_python_backend_utils as pb_utils


def node() -> pb_utils.Tensor:
    return pb_utils.Tensor(
        "NODE", np.array([os.environ.get("RAY_RAYLET_PID", "").encode()], dtype=object)
    )


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            params = json.loads(request.parameters())
            if params.get("inplace"):
                a += b  # OUTPUT0 = a + b, then OUTPUT1 = (a + b) - 2b = a - b
            else:
                a = a + b
            echo = {
                "parameters": params,
                "correlation_id": request.correlation_id(),
                "flags": request.flags(),
                "id": request.request_id(),
            }
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("OUTPUT0", a.copy()),
                        pb_utils.Tensor("OUTPUT1", a - 2 * b),
                        node(),
                        pb_utils.Tensor(
                            "ECHO", np.array([json.dumps(echo).encode()], dtype=object)
                        ),
                    ]
                )
            )
        return responses
