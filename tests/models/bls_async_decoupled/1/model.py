import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            for i in range(n):
                r = await pb_utils.InferenceRequest(
                    model_name="bls_echo",
                    requested_output_names=["OUTPUT0"],
                    inputs=[pb_utils.Tensor("INPUT0", np.array([i], np.float32))],
                ).async_exec()
                if r.has_error():
                    sender.send(pb_utils.InferenceResponse(error=r.error()))
                    continue
                out = pb_utils.get_output_tensor_by_name(r, "OUTPUT0").as_numpy()
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
