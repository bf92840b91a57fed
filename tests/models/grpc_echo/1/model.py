import json
import time

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.seq = 0
        self.cancelled = []

    def execute(self, requests):
        responses = []
        for request in requests:
            seq, self.seq = self.seq, self.seq + 1
            params = json.loads(request.parameters() or "{}")
            if "started_file" in params:
                open(params["started_file"], "w").close()
            deadline = time.monotonic() + params.get("wait_cancel_ms", 0) / 1000.0
            while time.monotonic() < deadline and not request.is_cancelled():
                time.sleep(0.01)
            if request.is_cancelled():
                self.cancelled.append(request.request_id())
            if "error" in params:
                error = pb_utils.TritonError(params["error"])
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            echo = dict(params)
            echo.update(
                request_id=request.request_id(),
                correlation_id=request.correlation_id(),
                flags=request.flags(),
                timeout_us=request.timeout(),
            )
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            text = json.dumps({**echo, "seq": seq, "cancelled": self.cancelled}).encode()
            outputs = [
                pb_utils.Tensor("OUT", data),
                pb_utils.Tensor("ECHO", np.array([[text]] * len(data), dtype=np.object_)),
            ]
            if params.get("response_parameters"):
                kept = {k: v for k, v in echo.items() if isinstance(v, (bool, int, str))}
                responses.append(pb_utils.InferenceResponse(outputs, parameters=kept))
            else:
                responses.append(pb_utils.InferenceResponse(outputs))
        return responses
