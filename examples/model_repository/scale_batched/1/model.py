"""scale_batched: OUTPUT0 = INPUT0 * scale, computed once per batch.

With dynamic batching, execute() may receive several requests. They are
concatenated along the batch dimension, computed in one numpy operation and
split back into one response per request.
"""

import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        model_config = json.loads(args["model_config"])
        self.scale = np.float32(model_config["parameters"]["scale"]["string_value"])

    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        batch = np.concatenate(inputs) * self.scale
        split_at = np.cumsum([x.shape[0] for x in inputs])[:-1]
        return [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", part)])
            for part in np.split(batch, split_at)
        ]
