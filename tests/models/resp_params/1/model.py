import json

import numpy as np

import triton_python_backend_utils as pb_utils


def _params(text):
    params = json.loads(text)
    if isinstance(params, dict):
        params = {int(k) if k.isdigit() else k: v for k, v in params.items()}
    return params


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "RESPONSE_PARAMETERS").as_numpy()[0]
            out = pb_utils.Tensor("OUTPUT", np.array([text], dtype=np.object_))
            try:
                response = pb_utils.InferenceResponse([out], parameters=_params(text.decode()))
                # what parameters() gives back, as the model sees it
                seen = np.array([response.parameters().encode()], dtype=np.object_)
                response = pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUTPUT", seen)], parameters=_params(text.decode())
                )
            except Exception as e:
                error = pb_utils.TritonError(str(e), pb_utils.TritonError.INVALID_ARG)
                response = pb_utils.InferenceResponse(error=error)
            if json.loads(request.parameters()).get("sender"):
                sender = request.get_response_sender()
                sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                responses.append(None)
            else:
                responses.append(response)
        return responses
