"""string_upper: OUTPUT0[i] = INPUT0[i].upper() for BYTES tensors.

BYTES tensors arrive as numpy arrays of dtype object holding ``bytes``;
an output may be any object array of bytes (or str) of the same shape.
"""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            strings = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            upper = np.array([s.upper() for s in strings.reshape(-1)], dtype=np.object_)
            out = pb_utils.Tensor("OUTPUT0", upper.reshape(strings.shape))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
