"""add_sub: OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1.

Written exactly as for Triton's Python backend (it is the backend's own
example, in short): the same file runs on Triton and on modelyard.
"""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # args["model_config"] is the complete model configuration as JSON text.
        model_config = json.loads(args["model_config"])
        # Take the output dtypes from the configuration rather than hard-coding them.
        self.output0_dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(model_config, "OUTPUT0")["data_type"]
        )
        self.output1_dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(model_config, "OUTPUT1")["data_type"]
        )

    def execute(self, requests):
        # One response per request, in the same order.
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            out0 = pb_utils.Tensor("OUTPUT0", (in0 + in1).astype(self.output0_dtype))
            out1 = pb_utils.Tensor("OUTPUT1", (in0 - in1).astype(self.output1_dtype))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out0, out1]))
        return responses

    def finalize(self):
        # Called once when the model is unloaded.
        pass
