"""Each request of a batch gets a GPU output of the length it asks for (N)."""

import torch

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.device = torch.device(f"cuda:{args['model_instance_device_id']}")

    def execute(self, requests):
        responses = []
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0, 0])
            out = torch.full((1, n), float(n), dtype=torch.float32, device=self.device)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor.from_dlpack("OUT", out)]))
        return responses
