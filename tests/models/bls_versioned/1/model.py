import numpy as np

import triton_python_backend_utils as pb_utils

VERSION = 1


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [
                    pb_utils.Tensor(
                        "OUTPUT0",
                        np.full_like(
                            pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy(), VERSION
                        ),
                    )
                ]
            )
            for r in requests
        ]
