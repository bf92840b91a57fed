"""Imports a sibling module both ways, as Triton allows."""

import helper  # absolute: the version folder is on sys.path

import triton_python_backend_utils as pb_utils

from . import helper as relative_helper  # relative: the version folder is a package


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            assert relative_helper.triple is helper.triple or relative_helper.triple(1) == 3
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", helper.triple(x))]))
        return out
