import json
import threading
import time

import numpy as np

import triton_python_backend_utils as pb_utils


def _response(text, prompt_tokens, count, params=None):
    outputs = [
        pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_)),
        pb_utils.Tensor("num_output_tokens", np.array([count], np.int32)),
    ]
    if prompt_tokens is not None:
        outputs.append(pb_utils.Tensor("num_input_tokens", np.array([prompt_tokens], np.int32)))
    return pb_utils.InferenceResponse(outputs, parameters=params or {})


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self._run, args=(request,), daemon=True).start()
        return None

    def _run(self, request):
        sender = request.get_response_sender()
        prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()[0].decode()
        stream_t = pb_utils.get_input_tensor_by_name(request, "stream")
        stream = True if stream_t is None else bool(stream_t.as_numpy()[0])
        sampling_t = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
        sampling = json.loads(sampling_t.as_numpy()[0]) if sampling_t is not None else {}
        marker = sampling.get("marker")
        if marker:  # until the client goes away
            open(marker + ".started", "w").close()
            sender.send(_response("w1", len(prompt.split()), 1))
            deadline = time.monotonic() + 60
            while not sender.is_cancelled() and time.monotonic() < deadline:
                sender.send(_response(" more", None, 1))
                time.sleep(0.02)
            with open(marker, "w") as f:
                f.write("cancelled" if sender.is_cancelled() else "timeout")
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        words = [("" if i == 0 else " ") + f"w{i + 1}" for i in range(sampling["max_tokens"])]
        params = {"finish_reason": sampling["finish_reason"]} if "finish_reason" in sampling else {}
        if not stream:
            sender.send(
                _response("".join(words), len(prompt.split()), len(words), params),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
            return
        for i, word in enumerate(words):
            last = i == len(words) - 1
            sender.send(
                _response(
                    word, len(prompt.split()) if i == 0 else None, 1, params if last else None
                ),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if last else 0,
            )
