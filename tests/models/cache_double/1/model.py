"""OUTPUT0 = 2 * INPUT0, OUTPUT1 = 3 * INPUT0."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUTPUT0", x * 2), pb_utils.Tensor("OUTPUT1", x * 3)]
                )
            )
        return responses
