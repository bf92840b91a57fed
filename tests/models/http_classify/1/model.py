"""OUTPUT = INPUT: class scores to test top-k classification."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [
                    pb_utils.Tensor(
                        "OUTPUT", pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy()
                    )
                ]
            )
            for r in requests
        ]
