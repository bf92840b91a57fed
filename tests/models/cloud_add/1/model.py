"""SUM = A + B; NAME = the model's name (which model a cloud route reached)."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_name"]

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "B").as_numpy()
            name = np.array([self.name.encode()], dtype=np.object_)
            outputs = [pb_utils.Tensor("SUM", a + b), pb_utils.Tensor("NAME", name)]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
