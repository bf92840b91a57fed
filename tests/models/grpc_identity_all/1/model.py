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
                tensor = pb_utils.get_input_tensor_by_name(request, "IN_" + dt)
                if tensor is not None:
                    outputs.append(pb_utils.Tensor("OUT_" + dt, tensor.as_numpy()))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
