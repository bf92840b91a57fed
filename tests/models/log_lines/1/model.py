"""Logs through pb_utils.Logger from initialize, execute (and a thread it starts) and
finalize; each execute line carries the request's TAG. Line numbers are read by the test from
the markers at the end of each line."""

import threading

import numpy as np

import triton_python_backend_utils as pb_utils

Logger = pb_utils.Logger


class TritonPythonModel:
    def initialize(self, args):
        Logger.log_info("init-info")  # @init-info
        Logger.log_verbose("init-verbose")  # @init-verbose

    def execute(self, requests):
        responses = []
        for request in requests:
            tag = pb_utils.get_input_tensor_by_name(request, "TAG").as_numpy()[0].decode()
            Logger.log_info(f"{tag} info")  # @info
            Logger.log_warn(f"{tag} warn")  # @warn
            Logger.log_error(f"{tag} error")  # @error
            Logger.log_verbose(f"{tag} verbose")  # @verbose
            Logger.log(f'{tag} "quoted"\nsecond line', Logger.WARNING)  # @log

            def in_thread(tag=tag):
                Logger.log_info(f"{tag} thread")  # @thread

            thread = threading.Thread(target=in_thread)
            thread.start()
            thread.join()
            out = np.array([tag.encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
        return responses

    def finalize(self):
        Logger.log_info("fini-info")  # @fini-info
