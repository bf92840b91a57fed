"""A model written for Triton's Python backend (the add_sub example's shape)."""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input(
            {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}
        )
        auto_complete_model_config.add_input(
            {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]}
        )
        auto_complete_model_config.add_output(
            {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}
        )
        auto_complete_model_config.add_output(
            {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]}
        )
        auto_complete_model_config.set_max_batch_size(0)
        return auto_complete_model_config

    def initialize(self, args):
        self.model_config = json.loads(args["model_config"])
        out0 = pb_utils.get_output_config_by_name(self.model_config, "OUTPUT0")
        out1 = pb_utils.get_output_config_by_name(self.model_config, "OUTPUT1")
        self.output0_dtype = pb_utils.triton_string_to_numpy(out0["data_type"])
        self.output1_dtype = pb_utils.triton_string_to_numpy(out1["data_type"])
        self.model_dir = pb_utils.get_model_dir()
        pb_utils.Logger.log_info(f"initialized {args['model_name']}")

    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            if in0.shape != in1.shape:
                error = pb_utils.TritonError("shape mismatch", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            out0 = pb_utils.Tensor("OUTPUT0", (in0 + in1).astype(self.output0_dtype))
            out1 = pb_utils.Tensor("OUTPUT1", (in0 - in1).astype(self.output1_dtype))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out0, out1]))
        return responses

    def finalize(self):
        pb_utils.Logger.log_info("Cleaning up...")
