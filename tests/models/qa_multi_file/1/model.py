import file1
import numpy as np

import triton_python_backend_utils as pb_utils

from . import file2


class TritonPythonModel:
    def initialize(self, args):
        if file1.FILE_NAME != "FILE1" or file2.FILE_NAME != "FILE2":
            raise pb_utils.TritonModelException("Imports do not work")

    def execute(self, requests):
        names = np.array([f"{file1.FILE_NAME} {file2.FILE_NAME}".encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", names)]) for _ in requests]
