import json
import os
import sys

import envonly_pkg  # only in the model's EXECUTION_ENV_PATH environment
import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        report = {
            "value": envonly_pkg.VALUE,
            "package": os.path.dirname(envonly_pkg.__file__),
            "prefix": sys.prefix,
            "virtual_env": os.environ.get("VIRTUAL_ENV"),
            "pid": os.getpid(),
        }
        out = np.array([json.dumps(report).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]) for _ in requests]
