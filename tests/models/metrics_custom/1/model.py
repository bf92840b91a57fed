import json
import os
import time

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.requests = pb_utils.MetricFamily(
            name="custom_requests", description="Requests seen", kind=pb_utils.MetricFamily.COUNTER
        )
        self.last = pb_utils.MetricFamily(
            name="custom_last_value",
            description="Last input value",
            kind=pb_utils.MetricFamily.GAUGE,
        )
        self.sizes = pb_utils.MetricFamily(
            name="custom_input_value",
            description="Input values",
            kind=pb_utils.MetricFamily.HISTOGRAM,
        )
        labels = {"model": args["model_name"], "kind": "test"}
        self.counter = self.requests.Metric(labels=labels)
        self.gauge = self.last.Metric(labels=labels)
        self.histogram = self.sizes.Metric(labels=labels, buckets=[1.0, 2.5, 10.0])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            params = json.loads(request.parameters())
            misuse = params.get("misuse")
            if misuse:
                responses.append(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(self._misuse(misuse)))
                )
                continue
            value = float(x[0])
            self.counter.increment(1)
            self.gauge.set(value)
            self.histogram.observe(value)
            if "gate" in params:  # still running when metrics are read: until the test says
                end = time.monotonic() + 30
                while not os.path.exists(params["gate"]) and time.monotonic() < end:
                    time.sleep(0.01)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([self.counter.value()], np.float32))]
                )
            )
        return responses

    def _misuse(self, what):
        try:
            if what == "negative":
                self.counter.increment(-1)
            elif what == "set_counter":
                self.counter.set(1)
            elif what == "observe_gauge":
                self.gauge.observe(1)
            elif what == "value_histogram":
                self.histogram.value()
            elif what == "kind_clash":
                pb_utils.MetricFamily(
                    name="custom_requests", description="x", kind=pb_utils.MetricFamily.GAUGE
                )
            elif what == "no_buckets":
                self.sizes.Metric(labels={})
            elif what == "bad_name":
                pb_utils.MetricFamily(
                    name="bad name", description="x", kind=pb_utils.MetricFamily.COUNTER
                )
            return "no error"
        except Exception as e:
            return f"{type(e).__name__}: {e}"
