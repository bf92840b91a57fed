# A model whose initialize holds its deploy: it writes its process ids (worker, replica) to
# $MODELYARD_TEST_GATE.started, then waits (bounded) until the file $MODELYARD_TEST_GATE
# exists. OUTPUT0 = INPUT0.
import os
import time

import triton_python_backend_utils as pb_utils

WAIT_S = 240.0


class TritonPythonModel:
    def initialize(self, args):
        gate = os.environ["MODELYARD_TEST_GATE"]
        with open(gate + ".tmp", "w") as f:
            f.write(f"{os.getpid()} {os.getppid()}")
        os.replace(gate + ".tmp", gate + ".started")
        deadline = time.monotonic() + WAIT_S
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.05)

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [
                    pb_utils.Tensor(
                        "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
                    )
                ]
            )
            for r in requests
        ]
