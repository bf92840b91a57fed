import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters() or "{}")
            delay = params.get("delay_ms", 1000) / 1000
            if "entered" in params:  # tells the test that execute has started
                open(params["entered"], "w").close()
            if "gate" in params:  # wait for the test to create this file; delay_ms bounds it
                end = time.monotonic() + delay
                while not os.path.exists(params["gate"]) and time.monotonic() < end:
                    time.sleep(0.01)
            else:
                time.sleep(delay)
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", in0.as_numpy())])
            )
        return responses
