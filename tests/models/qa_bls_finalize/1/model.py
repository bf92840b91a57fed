import numpy as np

import triton_python_backend_utils as pb_utils


def _call():
    request = pb_utils.InferenceRequest(
        model_name="bls_square",
        inputs=[pb_utils.Tensor("IN", np.array([1], np.int32))],
        requested_output_names=["OUT"],
    )
    return list(request.exec(decoupled=True))


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", request.inputs()[0].as_numpy())])
            for request in requests
        ]

    def finalize(self):
        _call()
