import json
import time

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        vocab = _vocab_module(args["model_repository"])
        ids = vocab.vocabulary()
        self.story = [ids[w] for w in vocab.story_words()]
        self.eos = ids[vocab.EOS]
        params = json.loads(args["model_config"]).get("parameters", {})
        delay = params.get("token_delay_ms", {}).get("string_value", "0")
        self.delay = float(delay) / 1000.0

    def _start(self, prompt_ids):
        """Where the story goes on: after the first place it has the prompt's last known
        word."""
        for token in reversed(prompt_ids):
            if token in self.story:
                return self.story.index(token) + 1
        return 0

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            prompt = pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy().tolist()
            limit = int(pb_utils.get_input_tensor_by_name(request, "max_tokens").as_numpy()[0])
            position, sent, reason = self._start(prompt), 0, "stop"
            while True:
                if sender.is_cancelled():
                    reason = "cancelled"
                    break
                if sent >= limit:
                    reason = "length"
                    break
                token = self.story[position] if position < len(self.story) else self.eos
                if token == self.eos:
                    break
                if self.delay:
                    time.sleep(self.delay)
                out = pb_utils.Tensor("output_ids", np.array([token], dtype=np.int64))
                sender.send(pb_utils.InferenceResponse([out]))
                position, sent = position + 1, sent + 1
            sender.send(
                pb_utils.InferenceResponse([], parameters={"finish_reason": reason}),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        return None


def _vocab_module(model_dir):
    import importlib.util
    from pathlib import Path

    path = Path(model_dir).resolve().parent / "tokenizer" / "vocab.py"
    spec = importlib.util.spec_from_file_location("vocab", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
