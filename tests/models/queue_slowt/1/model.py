import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            params = json.loads(r.parameters() or "{}")
            if "gate" in params:  # hold the instance until the test opens the gate (bounded)
                open(params["started"], "w").close()
                end = time.monotonic() + 30
                while not os.path.exists(params["gate"]) and time.monotonic() < end:
                    time.sleep(0.01)
        return [
            pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, "IN")])
            for r in requests
        ]
