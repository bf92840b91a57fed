import json
import os

import numpy as np

import c_python_backend_utils as c_utils
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        seen = {"free": c_utils.shared_memory.free_memory(), "pid": os.getpid(),
                "same_tensor": c_utils.Tensor is pb_utils.Tensor}  # fmt: skip
        out = np.array([json.dumps(seen).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]) for _ in requests]
