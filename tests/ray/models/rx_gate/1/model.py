import asyncio
import json
import os

import numpy as np

import triton_python_backend_utils as pb_utils

BOUND_S = 30.0


class TritonPythonModel:
    def initialize(self, args):
        self.groups = {}  # group -> [arrived, event]

    async def execute(self, requests):
        return [await self.one(r) for r in requests]

    async def one(self, request):
        params = json.loads(request.parameters())
        group = self.groups.setdefault(params.get("group", ""), [0, asyncio.Event()])
        group[0] += 1
        if group[0] >= int(params.get("n", 1)):
            group[1].set()
        try:
            await asyncio.wait_for(group[1].wait(), BOUND_S)
            together = 1
        except asyncio.TimeoutError:
            together = 0
        x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
        node = np.array([os.environ.get("RAY_RAYLET_PID", "").encode()], dtype=object)
        return pb_utils.InferenceResponse(
            [
                pb_utils.Tensor("OUTPUT0", x * 10),
                pb_utils.Tensor("TOGETHER", np.array([together], dtype=np.int32)),
                pb_utils.Tensor("NODE", node),
            ]
        )
