"""square_auto: OUTPUT0 = INPUT0 ** 2 (INT32), configured by auto_complete_config.

config.pbtxt names only the backend; auto_complete_config() adds the inputs,
outputs, max_batch_size and dynamic batching. It runs once per load, before
initialize(), unless the server runs with --disable-auto-complete-config.
"""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        inputs = [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [-1]}]
        outputs = [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [-1]}]

        # Only add what config.pbtxt does not already declare.
        config = auto_complete_model_config.as_dict()
        declared_inputs = {i["name"] for i in config["input"]}
        declared_outputs = {o["name"] for o in config["output"]}
        for i in inputs:
            if i["name"] not in declared_inputs:
                auto_complete_model_config.add_input(i)
        for o in outputs:
            if o["name"] not in declared_outputs:
                auto_complete_model_config.add_output(o)

        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", x * x)
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
