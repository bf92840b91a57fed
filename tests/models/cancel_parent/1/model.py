import asyncio
import json

import numpy as np

import triton_python_backend_utils as pb_utils


def child(parent, suffix, x):
    return pb_utils.InferenceRequest(
        model_name="cancel_child",
        inputs=[x],
        requested_output_names=["OUT"],
        request_id=f"{parent.request_id()}-{suffix}",
    )


def summary(response):
    if response.has_error():
        return [True, int(response.error().code()), response.error().message()]
    return [False, 0, ""]


class TritonPythonModel:
    def initialize(self, args):
        self.results = {}

    async def execute(self, requests):
        responses = []
        for request in requests:
            if not json.loads(request.parameters()).get("report", False):
                x = pb_utils.get_input_tensor_by_name(request, "IN")
                got = await asyncio.gather(
                    child(request, "a", x).async_exec(), child(request, "b", x).async_exec()
                )
                self.results[request.request_id()] = [summary(r) for r in got]
            text = json.dumps(self.results).encode()
            out = pb_utils.Tensor("OUT", np.array([text], dtype=np.object_))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
