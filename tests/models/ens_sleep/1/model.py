import os
import time
import uuid

import numpy as np

import triton_python_backend_utils as pb_utils


def _barrier(folder, token, parties=2):
    """Wait (10 s at most) until ``parties`` requests with this token have come."""
    open(os.path.join(folder, f"{token}-{uuid.uuid4().hex}"), "w").close()
    end = time.monotonic() + 10
    while time.monotonic() < end:
        if sum(name.startswith(f"{token}-") for name in os.listdir(folder)) >= parties:
            return
        time.sleep(0.01)


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            start = time.time()
            folder = os.environ.get("ENS_SLEEP_BARRIER")
            if folder:
                x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
                _barrier(folder, repr(float(x.reshape(-1)[0])))
            else:
                time.sleep(0.4)
            t = np.array([start, time.time()], dtype=np.float64)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("T", t)]))
        return out
