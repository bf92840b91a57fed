import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "RESPONSE_PARAMETERS").as_numpy()[0]
            sender = request.get_response_sender()
            for params in json.loads(text):
                out = np.array([json.dumps(params).encode()], dtype=np.object_)
                sender.send(
                    pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", out)], parameters=params)
                )
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
