"""Runs the model-control call its OP input names ("load:<model>", "unload:<model>",
"ready:<model>") and answers OUT: "ok", the is_model_ready result, or the exception's type and
text."""

import numpy as np

import triton_python_backend_utils as pb_utils


def _run(op, name):
    if op == "load":
        pb_utils.load_model(name)
    elif op == "unload":
        pb_utils.unload_model(name)
    elif op == "ready":
        return str(pb_utils.is_model_ready(name))
    else:
        raise ValueError(f"unknown op {op!r}")
    return "ok"


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            spec = pb_utils.get_input_tensor_by_name(request, "OP").as_numpy()[0].decode()
            op, _, name = spec.partition(":")
            try:
                text = _run(op, name)
            except Exception as e:
                text = f"{type(e).__name__}: {e}"
            out = np.array([text.encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
        return responses
