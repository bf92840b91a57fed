"""Running sum per sequence, keyed by the CORRID control input (string ids); reports the size
of the batch each request ran in."""

import time

import numpy as np

import triton_python_backend_utils as pb_utils


def _get(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def initialize(self, args):
        self.acc = {}

    def execute(self, requests):
        # Hold the instance a moment so concurrent sequences queue up and share batches.
        time.sleep(0.02)
        out = []
        for r in requests:
            corrid = _get(r, "CORRID")
            assert _get(r, "READY") == 1
            if _get(r, "START") == 1.0:
                self.acc[corrid] = 0
            self.acc[corrid] += int(_get(r, "VALUE"))
            acc = self.acc[corrid]
            if bool(_get(r, "END")):
                del self.acc[corrid]
            out.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("ACC", np.array([[acc]], np.int32)),
                        pb_utils.Tensor("BATCH", np.array([[len(requests)]], np.int32)),
                    ]
                )
            )
        return out
