import json
import threading
import time

import numpy as np

import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def initialize(self, args):
        self.cancelled = []
        self.lock = threading.Lock()

    def execute(self, requests):
        for request in requests:
            script = pb_utils.get_input_tensor_by_name(request, "SCRIPT").as_numpy()[0]
            steps = json.loads(script)
            threading.Thread(target=self.play, args=(request, steps), daemon=True).start()
        return None

    def play(self, request, steps):
        sender = request.get_response_sender()
        for step in steps:
            flags = FINAL if step.get("final") else 0
            if "sleep_ms" in step:
                time.sleep(step["sleep_ms"] / 1000.0)
            elif "wait_cancel_ms" in step:
                deadline = time.monotonic() + step["wait_cancel_ms"] / 1000.0
                while time.monotonic() < deadline and not sender.is_cancelled():
                    time.sleep(0.01)
                if sender.is_cancelled():
                    with self.lock:
                        self.cancelled.append(request.request_id())
                    sender.send(flags=FINAL)
                    return
            elif "report" in step:
                with self.lock:
                    ids = ",".join(self.cancelled).encode()
                out = pb_utils.Tensor("IDS", np.array([ids], dtype=np.object_))
                sender.send(pb_utils.InferenceResponse([out]), flags=flags)
            elif "error" in step:
                code = getattr(pb_utils.TritonError, step.get("code", "INTERNAL"))
                error = pb_utils.TritonError(step["error"], code)
                sender.send(pb_utils.InferenceResponse(error=error), flags=flags)
            elif "out" in step:
                out = pb_utils.Tensor("OUT", np.array([step["out"]], np.int32))
                sender.send(pb_utils.InferenceResponse([out]), flags=flags)
            elif flags:
                sender.send(flags=flags)
