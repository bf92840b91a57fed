"""Decoupled counter that notices cancellation (see config.pbtxt)."""

import json
import os
import time

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            params = json.loads(request.parameters() or "{}")
            delay = params.get("delay_ms", 0) / 1000.0
            marker = params.get("marker")
            gate = params.get("gate")
            if count < 0:
                sender.send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError("negative count")),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            for i in range(count):
                if request.is_cancelled():
                    if marker:  # written whole, then renamed: a reader never sees it empty
                        with open(marker + ".tmp", "w") as f:
                            f.write(f"cancelled after {i}\n")
                        os.replace(marker + ".tmp", marker)
                    break
                if delay:
                    time.sleep(delay)
                if gate and i > 0:  # after the first response, until the gate opens (bounded)
                    end = time.monotonic() + 30
                    while not os.path.exists(gate) and time.monotonic() < end:
                        time.sleep(0.01)
                out = pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))
                sender.send(pb_utils.InferenceResponse([out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
