import json
import os
import time

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters() or "{}")
            if "started" in params:  # tell the test it runs, then wait for its gate (bounded)
                open(params["started"], "w").close()
                end = time.monotonic() + 30
                while not os.path.exists(params["gate"]) and time.monotonic() < end:
                    time.sleep(0.01)
            time.sleep(float(params.get("delay", 0)))
            arr = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            with open("/proc/self/maps") as f:
                maps = sorted({line.split(None, 5)[5].strip() for line in f if "/dev/shm/" in line})
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("OUTPUT0", arr * 2),
                        pb_utils.Tensor("WRITABLE", np.array([arr.flags.writeable])),
                        pb_utils.Tensor(
                            "MAPS", np.array([m.encode() for m in maps] or [b""], np.object_)
                        ),
                    ]
                )
            )
        return responses
