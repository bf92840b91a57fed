"""Reports its process id. With request parameter "barrier" (a folder) a request waits until
"parties" requests are in execute at once (30 s at most; an error response otherwise), so
concurrent requests must spread over instances."""

import json
import os
import time
import uuid

import numpy as np

import triton_python_backend_utils as pb_utils


def _barrier(folder, parties):
    open(os.path.join(folder, uuid.uuid4().hex), "w").close()
    end = time.monotonic() + 30
    while len(os.listdir(folder)) < parties and time.monotonic() < end:
        time.sleep(0.01)
    return len(os.listdir(folder))


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters() or "{}")
            if "barrier" in params:
                seen = _barrier(params["barrier"], params["parties"])
                if seen < params["parties"]:
                    error = pb_utils.TritonError(f"only {seen} of {params['parties']} at once")
                    responses.append(pb_utils.InferenceResponse(error=error))
                    continue
            pid = np.array([os.getpid()], dtype=np.int64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PID", pid)]))
        return responses
