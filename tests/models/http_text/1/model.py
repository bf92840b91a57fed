"""text_output = upper(text_input); parameters echoed, plus the input's shape."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            upper = np.array([bytes(t).upper() for t in text.reshape(-1)], dtype=np.object_)
            params = json.loads(request.parameters() or "{}")
            params = {k: v for k, v in params.items() if isinstance(v, (str, int, bool))}
            params["input_shape"] = json.dumps(list(text.shape))
            out = pb_utils.Tensor("text_output", upper.reshape(text.shape))
            responses.append(pb_utils.InferenceResponse([out], parameters=params))
        return responses
