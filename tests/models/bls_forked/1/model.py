import asyncio
import json
import multiprocessing
import os

import numpy as np

import triton_python_backend_utils as pb_utils

POOL_WAIT_S = 30.0  # a task that never ends fails the request instead of hanging it


def _outcome(response):
    if response.has_error():
        return {"error": response.error().message(), "code": int(response.error().code())}
    return {"output": pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy().tolist()}


def calls(x):
    """exec, exec(decoupled=True), async_exec and is_model_ready to bls_echo; what each gave."""
    request = pb_utils.InferenceRequest(
        model_name="bls_echo",
        inputs=[pb_utils.Tensor("INPUT0", np.asarray(x, dtype=np.float32))],
        requested_output_names=["OUTPUT0"],
    )
    out = {"pid": os.getpid(), "exec": _outcome(request.exec())}
    out["stream"] = [
        _outcome(r) for r in request.exec(decoupled=True) if r.output_tensors() or r.has_error()
    ]
    out["async_exec"] = _outcome(asyncio.run(_awaited(request)))
    try:
        out["ready"] = pb_utils.is_model_ready("bls_echo")
    except pb_utils.TritonModelException as e:
        out["ready"] = str(e)
    return out


async def _awaited(request):
    return await request.async_exec()


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy().tolist()
            pool = multiprocessing.get_context("fork").Pool(2)
            try:
                children = pool.map_async(calls, [x, x]).get(POOL_WAIT_S)
            finally:
                pool.terminate()
                pool.join()
            result = {"pid": os.getpid(), "children": children, "after": calls(x)}
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("RESULT", np.array([json.dumps(result).encode()], np.object_))]
                )
            )
        return responses
