"""Decoupled: COUNT responses, then a flag-only final; a negative COUNT sends an error."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            if count < 0:
                sender.send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError("negative count")),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            for i in range(count):
                out = pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))
                text = pb_utils.Tensor("TEXT", np.array([f"tok{i}".encode()], dtype=np.object_))
                sender.send(pb_utils.InferenceResponse([out, text]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
