import asyncio

import numpy as np

import triton_python_backend_utils as pb_utils


def on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("OUTPUT0", x * 2),
                        pb_utils.Tensor("ON_LOOP", np.array([on_a_loop()])),
                    ]
                )
            )
        return responses
