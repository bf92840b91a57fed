import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.results = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            if not json.loads(request.parameters()).get("report", False):
                x = pb_utils.get_input_tensor_by_name(request, "IN")
                call = pb_utils.InferenceRequest(
                    model_name="cancel_child",
                    inputs=[x],
                    requested_output_names=["OUT"],
                    request_id=f"{request.request_id()}-s",
                )
                r = call.exec()
                self.results[request.request_id()] = [
                    [r.has_error(), r.error().message() if r.has_error() else ""]
                ]
            text = json.dumps(self.results).encode()
            out = pb_utils.Tensor("OUT", np.array([text], dtype=np.object_))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
