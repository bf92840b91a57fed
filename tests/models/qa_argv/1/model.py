import argparse
import json
import sys
import threading
import unittest

import numpy as np

import triton_python_backend_utils as pb_utils


class ArgvTest(unittest.TestCase):
    def test_argv(self):
        self.assertEqual(sys.argv, [""])


class TritonPythonModel:
    def initialize(self, args):
        self.seen = {"initialize": list(sys.argv)}
        self.seen["argparse"] = vars(argparse.ArgumentParser().parse_args())
        result = unittest.main("model", exit=False, verbosity=0).result
        self.seen["unittest"] = [result.testsRun, result.wasSuccessful()]
        started = threading.Event()
        self._stop = threading.Event()

        def run():
            self.seen["thread"] = list(sys.argv)
            started.set()
            self._stop.wait(60)
            self.seen["thread_later"] = list(sys.argv)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        started.wait(30)

    def execute(self, requests):
        seen = dict(self.seen, execute=list(sys.argv))
        out = pb_utils.Tensor("OUT", np.array([json.dumps(seen).encode()], dtype=np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]

    def finalize(self):
        self._stop.set()
        self._thread.join(30)
        pb_utils.Logger.log_info(
            f"qa_argv finalize {json.dumps([sys.argv, self.seen.get('thread_later')])}"
        )
