"""A sync BLS caller steered by its SPEC input (JSON):

model, version (-1), inputs ({name: {"data": [...], "dtype": "float32"}}; default: INPUT0 as
received), outputs (["OUTPUT0"]), params, correlation_id, flags, timeout (us), decoupled,
spec (a nested SPEC sent to the callee, for callees that are drivers themselves),
how: "sync" (exec in execute), "thread" (exec in a thread execute starts and joins),
"loop" (count calls in a row, for leak checks).

RESULT is JSON: pid, has_error, message, code, outputs of the (last) response, responses
(decoupled: the outputs of each response), shares_memory (INPUT0 sent vs OUTPUT0 received),
elapsed_s. OUTPUT0 is the callee's OUTPUT0 when it sent one.
"""

import json
import os
import threading
import time

import numpy as np

import triton_python_backend_utils as pb_utils


def _jsonable(arr):
    if arr.dtype == np.object_:
        return [x.decode() if isinstance(x, bytes) else str(x) for x in arr.reshape(-1)]
    return arr.reshape(-1).tolist()


def _outputs(response):
    return {t.name(): _jsonable(t.as_numpy()) for t in response.output_tensors()}


class TritonPythonModel:
    def execute(self, requests):
        return [self._one(request) for request in requests]

    def _one(self, request):
        spec = json.loads(pb_utils.get_input_tensor_by_name(request, "SPEC").as_numpy()[0])
        in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
        sent = np.array(in0, copy=True)  # an array this model owns, to check zero-copy
        inputs = []
        if "inputs" in spec:
            for name, v in spec["inputs"].items():
                inputs.append(
                    pb_utils.Tensor(name, np.array(v["data"], dtype=v.get("dtype", "float32")))
                )
        else:
            inputs.append(pb_utils.Tensor("INPUT0", sent))
        if "spec" in spec:
            nested = json.dumps(spec["spec"]).encode()
            inputs.append(pb_utils.Tensor("SPEC", np.array([nested], dtype=np.object_)))
        kwargs = {}
        for key in ("correlation_id", "flags", "timeout", "request_id"):
            if key in spec:
                kwargs[key] = spec[key]
        if "params" in spec:
            kwargs["parameters"] = spec["params"]
        bls = pb_utils.InferenceRequest(
            model_name=spec["model"],
            model_version=spec.get("version", -1),
            inputs=inputs,
            requested_output_names=spec.get("outputs", ["OUTPUT0"]),
            **kwargs,
        )
        decoupled = spec.get("decoupled", False)
        how = spec.get("how", "sync")
        result = {"pid": os.getpid()}
        t0 = time.monotonic()
        if how == "thread":
            box = {}

            def run():
                try:
                    box["response"] = bls.exec()
                except Exception as e:  # reported, not swallowed
                    box["exception"] = f"{type(e).__name__}: {e}"

            thread = threading.Thread(target=run)
            thread.start()
            thread.join(30)
            if "exception" in box:
                raise pb_utils.TritonModelException(box["exception"])
            responses = [box["response"]]
        elif how == "loop":
            for _ in range(spec["count"]):
                response = bls.exec()
                if response.has_error():
                    break
            responses = [response]
        elif decoupled:
            responses = list(bls.exec(decoupled=True))
            result["responses"] = [_outputs(r) for r in responses]
        else:
            responses = [bls.exec()]
        result["elapsed_s"] = time.monotonic() - t0
        last = responses[-1]
        result["has_error"] = last.has_error()
        if last.has_error():
            result["message"] = last.error().message()
            result["code"] = int(last.error().code())
        result["outputs"] = _outputs(last)
        out_tensors = [
            pb_utils.Tensor("RESULT", np.array([json.dumps(result).encode()], np.object_))
        ]
        out0 = pb_utils.get_output_tensor_by_name(last, "OUTPUT0")
        if out0 is not None:
            result["shares_memory"] = bool(np.shares_memory(sent, out0.as_numpy()))
            out_tensors[0] = pb_utils.Tensor(
                "RESULT", np.array([json.dumps(result).encode()], np.object_)
            )
            out_tensors.append(pb_utils.Tensor("OUTPUT0", out0.as_numpy()))
        else:
            out_tensors.append(pb_utils.Tensor("OUTPUT0", np.zeros([0], np.float32)))
        return pb_utils.InferenceResponse(out_tensors)
