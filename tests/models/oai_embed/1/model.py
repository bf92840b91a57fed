import numpy as np

import triton_python_backend_utils as pb_utils


def embed(text):
    data = text.encode()
    return np.array(
        [len(data), sum(data) % 1000, data[0], data[-1], len(text.split()), 0.5, -1.0, 2.25],
        dtype=np.float32,
    )


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()[0].decode()
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("embedding", embed(text)),
                        pb_utils.Tensor(
                            "num_input_tokens", np.array([len(text.split())], np.int32)
                        ),
                    ]
                )
            )
        return responses
