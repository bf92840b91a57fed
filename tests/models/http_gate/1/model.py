import json
import pathlib
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
                pathlib.Path(params["started_file"]).touch()
            deadline = time.monotonic() + params.get("wait_cancel_ms", 0) / 1000.0
            while time.monotonic() < deadline and not request.is_cancelled():
                time.sleep(0.01)
            if request.is_cancelled():
                self.cancelled.append(request.request_id())
            seen = json.dumps({"seq": seq, "cancelled": self.cancelled}).encode()
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            outputs = [
                pb_utils.Tensor("OUT", data),
                pb_utils.Tensor("SEEN", np.array([seen], dtype=np.object_)),
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
