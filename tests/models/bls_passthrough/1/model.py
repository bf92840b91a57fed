import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            infer_response = pb_utils.InferenceRequest(
                model_name="bls_echo",
                requested_output_names=["OUTPUT0", "META"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0")],
            ).exec()
            if infer_response.has_error():
                raise pb_utils.TritonModelException(infer_response.error().message())
            responses.append(
                pb_utils.InferenceResponse(output_tensors=infer_response.output_tensors())
            )
        return responses
