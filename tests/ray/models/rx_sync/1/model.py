import json
import os

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="rx_add",
                inputs=[
                    pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                    pb_utils.get_input_tensor_by_name(request, "INPUT1"),
                ],
                requested_output_names=["OUTPUT0", "OUTPUT1", "NODE", "ECHO"],
                parameters={**json.loads(request.parameters()), "via": "rx_sync"},
                correlation_id=request.correlation_id(),
                flags=request.flags(),
            )
            result = call.exec()
            if result.has_error():
                responses.append(pb_utils.InferenceResponse(error=result.error()))
                continue
            out = {t.name(): t for t in result.output_tensors()}
            node = np.array([os.environ.get("RAY_RAYLET_PID", "").encode()], dtype=object)
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("OUTPUT0", out["OUTPUT0"].as_numpy()),
                        pb_utils.Tensor("OUTPUT1", out["OUTPUT1"].as_numpy()),
                        pb_utils.Tensor("NODE", node),
                        pb_utils.Tensor("CALLEE_NODE", out["NODE"].as_numpy()),
                        pb_utils.Tensor("ECHO", out["ECHO"].as_numpy()),
                    ]
                )
            )
        return responses
