import time

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for _ in requests:
            start = time.time()
            time.sleep(0.4)
            t = np.array([start, time.time()], dtype=np.float64)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("T", t)]))
        return out
