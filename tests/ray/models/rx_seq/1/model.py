import os

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            corrid = int(pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy()[0])
            if pb_utils.get_input_tensor_by_name(request, "START").as_numpy()[0]:
                self.sums[corrid] = 0
            value = int(pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy()[0])
            self.sums[corrid] = self.sums.get(corrid, 0) + value
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("SUM", np.array([self.sums[corrid]], dtype=np.int32)),
                        # the replica process (this worker's parent)
                        pb_utils.Tensor("REPLICA", np.array([os.getppid()], dtype=np.int64)),
                    ]
                )
            )
        return responses
