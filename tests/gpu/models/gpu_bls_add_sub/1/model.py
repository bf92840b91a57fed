"""Moves its inputs to its GPU, calls gpu_add_sub through BLS with those GPU tensors (exec,
then exec(decoupled=True), whose iterator holds the one response), checks the two answers
agree and returns the first."""

import numpy as np
import torch

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.device = torch.device(f"cuda:{args['model_instance_device_id']}")

    def execute(self, requests):
        return [self._one(request) for request in requests]

    def _one(self, request):
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            host = pb_utils.get_input_tensor_by_name(request, name).as_numpy()
            gpu = torch.from_numpy(host).to(self.device)
            inputs.append(pb_utils.Tensor.from_dlpack(name, gpu))
        call = pb_utils.InferenceRequest(
            model_name="gpu_add_sub",
            inputs=inputs,
            requested_output_names=["OUTPUT0", "OUTPUT1"],
        )
        first = call.exec()
        if first.has_error():
            return pb_utils.InferenceResponse(error=first.error())
        responses = list(call.exec(decoupled=True))
        if len(responses) != 1:
            raise pb_utils.TritonModelException(f"{len(responses)} responses, expected 1")
        second = responses[0]
        if second.has_error():
            return pb_utils.InferenceResponse(error=second.error())
        outputs = []
        for name in ("OUTPUT0", "OUTPUT1"):
            a = _numpy(pb_utils.get_output_tensor_by_name(first, name))
            b = _numpy(pb_utils.get_output_tensor_by_name(second, name))
            if not np.array_equal(a, b):
                raise pb_utils.TritonModelException(
                    f"exec and exec(decoupled=True) differ on {name}"
                )
            outputs.append(pb_utils.Tensor(name, a))
        return pb_utils.InferenceResponse(outputs)


def _numpy(tensor):
    # A GPU output (Triton puts it where the callee made it) or a host one.
    if tensor.is_cpu():
        return tensor.as_numpy()
    return torch.from_dlpack(tensor).cpu().numpy()
