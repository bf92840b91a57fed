import json

import numpy as np

import triton_python_backend_utils as pb_utils


def _value(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    value = tensor.as_numpy().reshape(-1)[0]
    return value.decode() if isinstance(value, bytes) else bool(value)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            prompt = _value(request, "text_input")
            if prompt.startswith("fail:"):
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(prompt[5:])))
                continue
            if prompt.startswith("say:"):
                text = prompt[4:]
            else:
                sampling = _value(request, "sampling_parameters")
                text = json.dumps(
                    {
                        "prompt": prompt,
                        "stream": _value(request, "stream"),
                        "exclude_input_in_output": _value(request, "exclude_input_in_output"),
                        "sampling_parameters": None if sampling is None else json.loads(sampling),
                        "usage_asked": [
                            _value(request, "return_num_input_tokens"),
                            _value(request, "return_num_output_tokens"),
                        ],
                    }
                )
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_)),
                        pb_utils.Tensor(
                            "num_input_tokens", np.array([len(prompt.split())], np.int32)
                        ),
                        pb_utils.Tensor(
                            "num_output_tokens", np.array([len(text.split())], np.int32)
                        ),
                    ]
                )
            )
        return responses
