import json
import os

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            meta = {
                "parameters": request.parameters(),
                "correlation_id": request.correlation_id(),
                "flags": request.flags(),
                "request_id": request.request_id(),
                "timeout": request.timeout(),
                "pid": os.getpid(),
            }
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("OUTPUT0", in0),
                        pb_utils.Tensor("META", np.array([json.dumps(meta).encode()], np.object_)),
                    ]
                )
            )
        return responses
