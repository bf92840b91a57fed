import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters() or "{}")
            blocking = params.pop("blocking", False)
            call = pb_utils.InferenceRequest(
                model_name=params.pop("model", "bls_echo"),
                requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0")],
                parameters=params,
            )
            # A blocking exec() inside async execute holds the model's loop, not the server's.
            response = call.exec() if blocking else await call.async_exec()
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            out = pb_utils.get_output_tensor_by_name(response, "OUTPUT0")
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
