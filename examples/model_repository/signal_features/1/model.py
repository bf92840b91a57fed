"""Preprocessing: summarize a signal of any length as (mean, std, min, max)."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            signal = pb_utils.get_input_tensor_by_name(request, "SIGNAL").as_numpy()
            if signal.size == 0:
                error = pb_utils.TritonError("SIGNAL must hold at least one sample")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            features = np.array(
                [signal.mean(), signal.std(), signal.min(), signal.max()], dtype=np.float32
            )
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("FEATURES", features)]))
        return responses
