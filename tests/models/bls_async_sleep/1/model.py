import asyncio
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.waiting = []  # futures of the requests waiting to be "together"

    async def _together(self, count):
        """Wait (10 s at most) until ``count`` requests are in execute at once."""
        gate = asyncio.get_running_loop().create_future()
        self.waiting.append(gate)
        if len(self.waiting) >= count:
            for waiting in self.waiting:
                waiting.set_result(None)
            self.waiting = []
        try:
            await asyncio.wait_for(asyncio.shield(gate), 10)
            return None
        except asyncio.TimeoutError:
            self.waiting.remove(gate)
            return f"only {len(self.waiting) + 1} of {count} requests ran at once"

    async def execute(self, requests):
        together = max(json.loads(r.parameters() or "{}").get("together", 0) for r in requests)
        if together:
            problem = await self._together(together)
            if problem:
                error = pb_utils.TritonError(problem)
                return [pb_utils.InferenceResponse(error=error) for _ in requests]
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
