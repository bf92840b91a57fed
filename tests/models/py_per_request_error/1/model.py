import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[],
                error=pb_utils.TritonError("bad value", pb_utils.TritonError.INVALID_ARG),
            )
            for _ in requests
        ]
