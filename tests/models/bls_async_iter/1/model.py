import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters() or "{}")
            iterator = await pb_utils.InferenceRequest(
                model_name="bls_square",
                requested_output_names=["OUT"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "IN")],
                parameters=params,
            ).async_exec(decoupled=True)
            if params.get("iterate") == "async_for":  # modelyard's ResponseIterator extension
                received = [r async for r in iterator]
            else:  # a plain `for` on the event loop's thread, as Triton's examples do
                received = [r for r in iterator]
            count, total = 0, 0
            for r in received:
                if r.has_error():
                    raise pb_utils.TritonModelException(r.error().message())
                count += 1
                if r.output_tensors():
                    total += int(pb_utils.get_output_tensor_by_name(r, "OUT").as_numpy()[0])
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("COUNT", np.array([count], np.int32)),
                        pb_utils.Tensor("SUM", np.array([total], np.int32)),
                    ]
                )
            )
        return responses
