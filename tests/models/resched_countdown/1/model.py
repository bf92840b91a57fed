import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.left = None  # responses still to send for the sequence in this instance's slot

    def execute(self, requests):
        for request in requests:
            if request.is_cancelled():  # forget this sequence and end its request
                self.left = None
                request.get_response_sender().send(
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
                )
                continue
            if self.left is None:
                self.left = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            self.left -= 1
            outputs = [
                pb_utils.Tensor("OUT", np.array([self.left], np.int32)),
                pb_utils.Tensor("FLAGS", np.array([request.flags()], np.int32)),
            ]
            sender = request.get_response_sender()
            if self.left <= 0:
                self.left = None
                sender.send(
                    pb_utils.InferenceResponse(outputs),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
            else:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(pb_utils.InferenceResponse(outputs))
        return None
