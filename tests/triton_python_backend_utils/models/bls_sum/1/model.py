"""A BLS model: sums what the 'repeat' model streams back (sync) and asks 'add_sub' (async)."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN")
            stream = pb_utils.InferenceRequest(
                model_name="repeat", inputs=[values], requested_output_names=["OUT"]
            )
            total = 0
            for response in stream.exec(decoupled=True):
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
                if response.output_tensors():
                    total += int(pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()[0])
            x = pb_utils.Tensor("INPUT0", np.full(4, total, dtype=np.float32))
            y = pb_utils.Tensor("INPUT1", np.ones(4, dtype=np.float32))
            add = pb_utils.InferenceRequest(
                model_name="add_sub", inputs=[x, y], requested_output_names=["OUTPUT0"]
            )
            result = await add.async_exec()
            if result.has_error():
                responses.append(pb_utils.InferenceResponse(error=result.error()))
                continue
            responses.append(pb_utils.InferenceResponse(result.output_tensors()))
        return responses
