import json
import os
import time

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.cancelled = []

    def execute(self, requests):
        responses = []
        for request in requests:
            start = time.monotonic()
            if request.is_cancelled():
                self.cancelled.append(request.request_id())
                responses.append(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError("cancelled"))
                )
                continue
            params = json.loads(request.parameters() or "{}")
            if "started" in params:
                open(params["started"], "w").close()
            if "gate" in params:  # until the test opens the gate (30 s at most)
                end = time.monotonic() + 30
                while not os.path.exists(params["gate"]) and time.monotonic() < end:
                    if request.is_cancelled():
                        break
                    time.sleep(0.005)
            deadline = time.monotonic() + params.get("sleep_ms", 0) / 1000.0
            while time.monotonic() < deadline and not request.is_cancelled():
                time.sleep(0.005)
            if params.get("crash"):
                os._exit(3)
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            echo = {"start": start, "end": time.monotonic(), "cancelled": self.cancelled}
            text = np.array([json.dumps(echo).encode()], dtype=np.object_)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", data), pb_utils.Tensor("ECHO", text)]
                )
            )
        return responses
