"""resp_params_bls with ``async def execute`` and ``async_exec``."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


def calls(request):
    """The BLS requests to resp_params and resp_params_decoupled, from the caller's inputs."""
    single = pb_utils.get_input_tensor_by_name(request, "RESPONSE_PARAMETERS").as_numpy()
    many = pb_utils.get_input_tensor_by_name(request, "RESPONSE_PARAMETERS_DECOUPLED").as_numpy()
    return [
        pb_utils.InferenceRequest(
            model_name=model,
            inputs=[pb_utils.Tensor("RESPONSE_PARAMETERS", tensor)],
            requested_output_names=["OUTPUT"],
        )
        for model, tensor in [("resp_params", single), ("resp_params_decoupled", many)]
    ]


def report(reply, replies):
    """OUTPUT: what parameters() gave for each BLS response; the caller's own response carries
    resp_params' parameters."""
    seen = {
        "single": reply.parameters(),
        "single_error": reply.error().message() if reply.has_error() else None,
        "decoupled": [r.parameters() for r in replies],
    }
    out = np.array([json.dumps(seen).encode()], dtype=np.object_)
    params = json.loads(reply.parameters()) if reply.parameters() else None
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", out)], parameters=params)


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            one, stream = calls(request)
            reply = await one.async_exec()
            replies = list(await stream.async_exec(decoupled=True))
            responses.append(report(reply, replies))
        return responses
