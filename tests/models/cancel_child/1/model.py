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
            if not json.loads(request.parameters()).get("report", False):
                started = os.environ.get("CANCEL_CHILD_STARTED")
                if started:  # tell the test this request runs
                    open(os.path.join(started, request.request_id()), "w").close()
                deadline = time.monotonic() + 10.0
                while not request.is_cancelled() and time.monotonic() < deadline:
                    time.sleep(0.005)
                if request.is_cancelled():
                    self.cancelled.append(request.request_id())
            text = ",".join(self.cancelled).encode()
            out = pb_utils.Tensor("OUT", np.array([text], dtype=np.object_))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
