import json

import triton_python_backend_utils as pb_utils

NAMES = ("text_input", "stream", "sampling_parameters")


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            inputs = [t for n in NAMES if (t := pb_utils.get_input_tensor_by_name(request, n))]
            call = pb_utils.InferenceRequest(
                model_name="oai_stream",
                inputs=inputs,
                requested_output_names=["text_output", "num_input_tokens", "num_output_tokens"],
            )
            async for response in await call.async_exec(decoupled=True):
                if response.has_error():
                    sender.send(pb_utils.InferenceResponse(error=response.error()))
                    break
                if response.output_tensors():
                    sender.send(
                        pb_utils.InferenceResponse(
                            response.output_tensors(),
                            parameters=json.loads(response.parameters() or "{}"),
                        )
                    )
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
