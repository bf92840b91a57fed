"""Sum and difference computed on the instance's GPU; the outputs stay GPU tensors (is_cpu()
False) until the server copies them for the client."""

import torch
from torch.utils.dlpack import to_dlpack

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.device = torch.device(f"cuda:{args['model_instance_device_id']}")

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            x = _on_device(a, self.device)
            y = _on_device(b, self.device)
            out0 = pb_utils.Tensor.from_dlpack("OUTPUT0", to_dlpack(x + y))
            out1 = pb_utils.Tensor.from_dlpack("OUTPUT1", x - y)  # (the __dlpack__ protocol)
            if out0.is_cpu() or out1.is_cpu():
                raise pb_utils.TritonModelException("outputs should be on the GPU")
            responses.append(pb_utils.InferenceResponse([out0, out1]))
        return responses


def _on_device(tensor, device):
    if tensor.is_cpu():
        return torch.from_numpy(tensor.as_numpy()).to(device)
    return torch.from_dlpack(tensor)
