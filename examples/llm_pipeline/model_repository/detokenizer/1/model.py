import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.tokenizer = _vocab_module(args["model_repository"]).build_tokenizer()

    def execute(self, requests):
        responses = []
        for request in requests:
            ids = pb_utils.get_input_tensor_by_name(request, "output_ids").as_numpy()
            text = self.tokenizer.decode(ids.reshape(-1).tolist())
            out = pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], np.object_))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses


def _vocab_module(model_dir):
    import importlib.util
    from pathlib import Path

    path = Path(model_dir).resolve().parent / "tokenizer" / "vocab.py"
    spec = importlib.util.spec_from_file_location("vocab", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
