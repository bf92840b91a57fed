import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            pb_utils.Logger.log_info(f"Request timeout: {request.timeout()}")
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", request.inputs()[0].as_numpy())])
            for request in requests
        ]
