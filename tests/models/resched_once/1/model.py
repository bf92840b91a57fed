import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.execs = {}  # correlation id -> executions

    def execute(self, requests):
        responses = []
        for request in requests:
            cid = request.correlation_id()
            self.execs[cid] = self.execs.get(cid, 0) + 1
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            response = pb_utils.InferenceResponse(
                [
                    pb_utils.Tensor("OUT", x),
                    pb_utils.Tensor("EXECS", np.array([self.execs[cid]], np.int32)),
                ]
            )
            if self.execs[cid] == 1:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                wrong = json.loads(request.parameters()).get("wrong", False)
                responses.append(response if wrong else None)
            else:
                del self.execs[cid]
                responses.append(response)
        return responses
