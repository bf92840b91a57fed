"""Returns the initialize() args it was given, as JSON."""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = dict(args)

    def execute(self, requests):
        out = np.array([json.dumps(self.args).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("ARGS", out)]) for _ in requests]
