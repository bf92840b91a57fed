"""Outputs made by torch and handed over through DLPack (no copy into the response): an FP32
tensor, and a BF16 one (reachable only through DLPack)."""

import torch

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = torch.from_dlpack(pb_utils.get_input_tensor_by_name(request, "INPUT0"))
            doubled = pb_utils.Tensor.from_dlpack("DOUBLED", x * 2)
            as_bf16 = pb_utils.Tensor.from_dlpack("AS_BF16", x.to(torch.bfloat16))
            responses.append(pb_utils.InferenceResponse([doubled, as_bf16]))
        return responses
