import json

import numpy as np

import triton_python_backend_utils as pb_utils


def _plain(value):
    if isinstance(value, bytes):
        return value.decode()
    return value.item() if hasattr(value, "item") else value


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            got = {}
            for tensor in request.inputs():
                array = tensor.as_numpy()
                values = [_plain(v) for v in array.reshape(-1)]
                got[tensor.name()] = {
                    "shape": list(array.shape),
                    "value": values if tensor.name() == "stop_words" else values[0],
                }
            text = json.dumps(got, sort_keys=True)
            out = np.array([[text.encode()]], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", out)]))
        return responses
