import json
import os
import threading
import time

import numpy as np

import triton_python_backend_utils as pb_utils

BOUND_S = 60.0  # a stream nobody cancels ends anyway


def node() -> pb_utils.Tensor:
    return pb_utils.Tensor(
        "NODE", np.array([os.environ.get("RAY_RAYLET_PID", "").encode()], dtype=object)
    )


def stream(request):
    sender = request.get_response_sender()
    count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
    params = json.loads(request.parameters())
    if params.get("started"):
        with open(params["started"], "w") as f:
            f.write("started")
    i = 0
    deadline = time.monotonic() + BOUND_S
    while (count < 0 or i < count) and time.monotonic() < deadline:
        if request.is_cancelled():
            marker = params.get("marker")
            if marker:
                with open(marker, "w") as f:
                    f.write("cancelled")
            break
        out = pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))
        sender.send(pb_utils.InferenceResponse([out, node()]))
        i += 1
        if count < 0:
            time.sleep(0.05)
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:  # each stream on its own thread: execute returns at once
            threading.Thread(target=stream, args=(request,), daemon=True).start()
        return None
