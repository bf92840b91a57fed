import json
import time

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            deadline = time.monotonic() + 10.0
            limit = json.loads(request.parameters()).get("max_responses", -1)
            i = 0
            while not request.is_cancelled() and time.monotonic() < deadline and i != limit:
                out = pb_utils.Tensor("OUT", np.array([i], np.int32))
                sender.send(pb_utils.InferenceResponse([out]))
                i += 1
                time.sleep(0.005)
            final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
            if i == limit:
                sender.send(flags=final)
                continue
            if request.is_cancelled():
                code = pb_utils.TritonError.CANCELLED
                error = pb_utils.TritonError("request has been cancelled", code)
            else:
                error = pb_utils.TritonError("never cancelled")
            sender.send(pb_utils.InferenceResponse(error=error), flags=final)
        return None
