import triton_python_backend_utils as pb_utils

# target model -> (first input, second input, sum output): Triton's naming conventions.
NAMES = {
    "onnx_add_sub": ("INPUT0", "INPUT1", "OUTPUT0"),
    "torch_add_sub": ("INPUT__0", "INPUT__1", "OUTPUT__0"),
}


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            target = pb_utils.get_input_tensor_by_name(request, "TARGET").as_numpy()[0].decode()
            in0, in1, out = NAMES[target]
            call = pb_utils.InferenceRequest(
                model_name=target,
                requested_output_names=[out],
                inputs=[
                    pb_utils.Tensor(in0, a.reshape(1, 4)),
                    pb_utils.Tensor(in1, b.reshape(1, 4)),
                ],
            )
            resp = call.exec()
            if resp.has_error():
                responses.append(pb_utils.InferenceResponse(error=resp.error()))
                continue
            total = pb_utils.get_output_tensor_by_name(resp, out).as_numpy().reshape(4)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", total)]))
        return responses
