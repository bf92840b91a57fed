import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            spec = json.loads(pb_utils.get_input_tensor_by_name(request, "SPEC").as_numpy()[0])
            nested = json.dumps(spec.get("spec", {})).encode()
            response = pb_utils.InferenceRequest(
                model_name=spec["model"],
                inputs=[
                    pb_utils.Tensor("SPEC", np.array([nested], np.object_)),
                    pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                ],
                requested_output_names=["RESULT", "OUTPUT0"],
            ).exec()
            if response.has_error():
                responses.append(pb_utils.InferenceResponse(error=response.error()))
            else:
                responses.append(pb_utils.InferenceResponse(response.output_tensors()))
        return responses
