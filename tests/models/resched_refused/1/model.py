import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            request.get_response_sender().send(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x.astype(np.int32))])
            )
            request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
        return None
