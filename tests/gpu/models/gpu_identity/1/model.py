"""Returns its input IN as OUT, the same tensor (a GPU input stays on its GPU), and WHERE:
[1 if IN is in host memory else 0, IN's device id, IN's data pointer (0 on the host)]; with
the request parameter "memory", the last is what torch has allocated on the GPU here."""

import json

import numpy as np
import torch

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            t = pb_utils.get_input_tensor_by_name(request, "IN")
            if t.is_cpu():
                where = [1, 0, 0]
            else:
                x = torch.from_dlpack(t)
                where = [0, x.device.index, x.data_ptr()]
            if json.loads(request.parameters() or "{}").get("memory"):
                where[2] = torch.cuda.memory_allocated(0)
            out = pb_utils.Tensor.from_dlpack("OUT", t)
            info = pb_utils.Tensor("WHERE", np.array(where, dtype=np.int64))
            responses.append(pb_utils.InferenceResponse([out, info]))
        return responses
