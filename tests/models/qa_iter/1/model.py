import asyncio
import json

import numpy as np

import triton_python_backend_utils as pb_utils


def _request():
    return pb_utils.InferenceRequest(
        model_name="bls_square",
        inputs=[pb_utils.Tensor("IN", np.array([4], np.int32))],
        requested_output_names=["OUT"],
    )


def _steps(responses):
    """next() then the rest, all again twice, then a loop broken after 2, next(), the rest."""
    counts = []
    next(responses)
    counts.append(sum(1 for _ in responses))
    counts.append(sum(1 for _ in responses))
    counts.append(sum(1 for _ in responses))
    for seen, _ in enumerate(responses, 1):
        if seen == 2:
            break
    next(responses)
    counts.append(sum(1 for _ in responses))
    counts.append(sum(1 for _ in responses))  # all again
    return counts


async def _async_steps(responses):
    counts = [sum([1 async for _ in responses])]
    seen = 0
    async for _ in responses:
        seen += 1
        if seen == 2:
            break
    await responses.__anext__()
    counts.append(sum([1 async for _ in responses]))
    return counts


class TritonPythonModel:
    async def execute(self, requests):
        result = {
            "sync": await asyncio.to_thread(lambda: _steps(_request().exec(decoupled=True))),
            "async": await _async_steps(await _request().async_exec(decoupled=True)),
        }
        out = pb_utils.Tensor("OUT", np.array([json.dumps(result).encode()], dtype=np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
