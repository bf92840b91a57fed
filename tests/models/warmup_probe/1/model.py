import json
import os
import time

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.seen = []  # one entry per execute: the inputs of each request

    def execute(self, requests):
        probe = os.environ.get("WARMUP_PROBE_DIR")
        if probe and not self.seen:  # the first warmup batch: show that loading waits for it
            open(os.path.join(probe, "warming"), "w").close()
            end = time.monotonic() + 30  # until the test creates "release" (bounded)
            while not os.path.exists(os.path.join(probe, "release")) and time.monotonic() < end:
                time.sleep(0.01)
        log = json.dumps(self.seen)
        self.seen.append(
            [pb_utils.get_input_tensor_by_name(r, "X").as_numpy().tolist() for r in requests]
        )
        count = sum(len(batch) for batch in self.seen[:-1])
        responses = []
        for r in requests:
            n = pb_utils.get_input_tensor_by_name(r, "X").as_numpy().shape[0]
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("SEEN", np.full((n, 1), count, np.int64)),
                        pb_utils.Tensor("LOG", np.full((n, 1), log.encode(), np.object_)),
                    ]
                )
            )
        return responses
