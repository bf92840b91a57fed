"""Every request fails: IN == 0 with a TritonError response, otherwise by raising."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            if value != 0:
                raise pb_utils.TritonModelException("model raised on purpose")
            responses.append(
                pb_utils.InferenceResponse(error=pb_utils.TritonError("model says no"))
            )
        return responses
