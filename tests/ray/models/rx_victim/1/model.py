import json
import os
import time

import numpy as np

import triton_python_backend_utils as pb_utils

HOLD_S = 60.0


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            if pb_utils.get_input_tensor_by_name(request, "HOLD").as_numpy()[0]:
                # Written aside, then renamed: the test never reads it half-written.
                started = json.loads(request.parameters())["started"]
                with open(started + ".tmp", "w") as f:
                    f.write(str(os.getppid()))
                os.replace(started + ".tmp", started)
                deadline = time.monotonic() + HOLD_S
                while time.monotonic() < deadline and not request.is_cancelled():
                    time.sleep(0.05)
            replica = np.array([os.getppid()], dtype=np.int64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("REPLICA", replica)]))
        return responses
