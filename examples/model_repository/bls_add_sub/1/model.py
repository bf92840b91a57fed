"""Business Logic Scripting: call another model (add_sub) from execute."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            inner = pb_utils.InferenceRequest(
                model_name="add_sub",
                requested_output_names=["OUTPUT0", "OUTPUT1"],
                inputs=[
                    pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                    pb_utils.get_input_tensor_by_name(request, "INPUT1"),
                ],
            ).exec()
            if inner.has_error():
                # Errors come back as error responses; pass the message on to the client.
                responses.append(pb_utils.InferenceResponse(error=inner.error()))
            else:
                # BLS outputs go straight into this model's response.
                responses.append(pb_utils.InferenceResponse(inner.output_tensors()))
        return responses
