import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        vocab = _vocab_module(args["model_repository"])
        self.tokenizer = vocab.build_tokenizer()

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            ids = self.tokenizer.encode(text.reshape(-1)[0].decode("utf-8")).ids
            out = pb_utils.Tensor("input_ids", np.array(ids, dtype=np.int64))
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
