import json
import sys
import threading

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.tag = config["parameters"]["tag"]["string_value"]

    def execute(self, requests):
        responses = []
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])

            def run(thread, count=count):
                for n in range(count):
                    print(f"qa-print {self.tag} {thread} {n} " + self.tag * 200)
                sys.stdout.flush()

            threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUT", request.inputs()[0].as_numpy())])
            )
        return responses
