import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            time.sleep(json.loads(request.parameters() or "{}").get("delay_ms", 1000) / 1000)
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", in0.as_numpy())])
            )
        return responses
