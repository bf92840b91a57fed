"""A stateful model: keeps a running sum per sequence (correlation id)."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            corrid = int(
                pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy().reshape(-1)[0]
            )
            if pb_utils.get_input_tensor_by_name(request, "START").as_numpy().reshape(-1)[0]:
                self.sums[corrid] = 0
            value = pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy()
            self.sums[corrid] = self.sums.get(corrid, 0) + int(value.reshape(-1)[0])
            total = np.full_like(value, self.sums[corrid])
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", total)]))
        return responses
