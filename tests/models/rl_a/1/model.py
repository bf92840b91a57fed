import json
import os
import time

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """The rate limiter tests' model (every rl_* model runs this file). Request parameters:
    "started" (a path) is created when the execution starts; "gate" (a path): the execution
    waits until that file exists (30 s at most). ECHO (IN's shape) holds JSON: the execution's
    "start" and "end" (time.monotonic, one clock for every process) and its "batch" size."""

    def execute(self, requests):
        start = time.monotonic()
        for request in requests:
            params = json.loads(request.parameters() or "{}")
            if "started" in params:
                open(params["started"], "w").close()
            if "gate" in params:
                deadline = time.monotonic() + 30
                while not os.path.exists(params["gate"]) and time.monotonic() < deadline:
                    time.sleep(0.005)
        echo = json.dumps({"start": start, "end": time.monotonic(), "batch": len(requests)})
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            text = np.full(data.shape, echo.encode(), dtype=np.object_)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", data), pb_utils.Tensor("ECHO", text)]
                )
            )
        return responses
