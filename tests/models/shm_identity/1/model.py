"""Echo INPUT0 as OUTPUT0 and (when given) TEXT as TEXT_OUT."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = [
                pb_utils.Tensor(
                    "OUTPUT0", pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                )
            ]
            text = pb_utils.get_input_tensor_by_name(request, "TEXT")
            if text is not None:
                outputs.append(pb_utils.Tensor("TEXT_OUT", text.as_numpy()))
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
