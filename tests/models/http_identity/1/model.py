"""Echo every present input IN_<DT> as OUT_<DT>; request parameters come back as response
parameters (string, int and bool values)."""

import json

import triton_python_backend_utils as pb_utils

DATATYPES = [
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BYTES",
]


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for dt in DATATYPES:
                t = pb_utils.get_input_tensor_by_name(request, f"IN_{dt}")
                if t is not None:
                    outputs.append(pb_utils.Tensor(f"OUT_{dt}", t.as_numpy()))
            params = json.loads(request.parameters() or "{}")
            params = {k: v for k, v in params.items() if isinstance(v, (str, int, bool))}
            try:
                response = pb_utils.InferenceResponse(outputs, parameters=params or None)
            except TypeError:  # Triton before 24.10 has no response parameters
                response = pb_utils.InferenceResponse(outputs)
            responses.append(response)
        return responses
