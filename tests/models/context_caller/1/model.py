import asyncio

import numpy as np

import triton_python_backend_utils as pb_utils


def _call(request):
    return pb_utils.InferenceRequest(
        model_name="context_echo",
        requested_output_names=["CONTEXT"],
        inputs=[pb_utils.get_input_tensor_by_name(request, "IN")],
    )


async def _async_call(request):
    return await _call(request).async_exec()


def _context(response):
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return pb_utils.get_output_tensor_by_name(response, "CONTEXT").as_numpy()[0]


def _text(name, value):
    return pb_utils.Tensor(name, np.array([value], dtype=np.object_))


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            sync = _context(_call(request).exec())
            async_ = _context(asyncio.run(_async_call(request)))
            own = (request.trace().get_context() or "").encode()
            responses.append(
                pb_utils.InferenceResponse(
                    [_text("CONTEXT", own), _text("SYNC", sync), _text("ASYNC", async_)]
                )
            )
        return responses
