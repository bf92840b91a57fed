import json
import os
import time
import uuid

import numpy as np

import triton_python_backend_utils as pb_utils


def _barrier(folder, parties):
    """Wait (30 s at most) until ``parties`` requests have reached this point."""
    open(os.path.join(folder, uuid.uuid4().hex), "w").close()
    end = time.monotonic() + 30
    while len(os.listdir(folder)) < parties and time.monotonic() < end:
        time.sleep(0.01)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters() or "{}")
            result = {"has_error": False, "message": ""}
            if params.get("depth", 0) > 0:
                if "barrier" in params:
                    _barrier(params["barrier"], params.get("parties", 2))
                inner = pb_utils.InferenceRequest(
                    model_name="bls_self_pair",
                    inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0")],
                    requested_output_names=["RESULT"],
                    parameters={"depth": params["depth"] - 1},
                    timeout=params.get("timeout_us", 0),
                ).exec()
                if inner.has_error():
                    result = {"has_error": True, "message": inner.error().message()}
            out = np.array([json.dumps(result).encode()], np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("RESULT", out)]))
        return responses
