import asyncio

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            calls = [
                pb_utils.InferenceRequest(
                    model_name="bls_echo",
                    requested_output_names=["OUTPUT0"],
                    inputs=[pb_utils.Tensor("INPUT0", (in0 + i).astype(np.float32))],
                ).async_exec()
                for i in range(8)
            ]
            results = await asyncio.gather(*calls)
            for r in results:
                if r.has_error():
                    raise pb_utils.TritonModelException(r.error().message())
            out = np.concatenate(
                [pb_utils.get_output_tensor_by_name(r, "OUTPUT0").as_numpy() for r in results]
            )
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
