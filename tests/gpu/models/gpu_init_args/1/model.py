"""Answers with the initialize args of the instance that ran the request, and what torch sees
of the device the model chose from them."""

import json

import numpy as np
import torch

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = dict(args)
        if args["model_instance_kind"] == "GPU":
            # The model picks its device from the args, as under Triton.
            self.device = torch.device(f"cuda:{args['model_instance_device_id']}")
        else:
            self.device = torch.device("cpu")
        self.on_device = torch.zeros(1, device=self.device)

    def execute(self, requests):
        report = {
            key: self.args[key]
            for key in ("model_instance_kind", "model_instance_device_id", "model_instance_name")
        }
        report["tensor_device"] = str(self.on_device.device)
        report["visible_devices"] = torch.cuda.device_count()
        text = np.array([json.dumps(report).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("ARGS", text)]) for _ in requests]
