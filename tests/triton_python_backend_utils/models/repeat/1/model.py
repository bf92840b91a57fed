"""A decoupled model: sends IN[i] as one response each, then a flag-only FINAL."""

import threading

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import json

        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException("repeat must be decoupled")
        self.threads = []

    def execute(self, requests):
        for request in requests:
            thread = threading.Thread(target=self._respond, args=(request,))
            thread.start()
            self.threads.append(thread)
        return None

    def _respond(self, request):
        sender = request.get_response_sender()
        values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
        for value in values:
            if sender.is_cancelled():
                sender.send(
                    pb_utils.InferenceResponse(
                        error=pb_utils.TritonError("cancelled", pb_utils.TritonError.CANCELLED)
                    )
                )
                break
            out = pb_utils.Tensor("OUT", np.array([value], dtype=values.dtype))
            sender.send(pb_utils.InferenceResponse([out]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join()
