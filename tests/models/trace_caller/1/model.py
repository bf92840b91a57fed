"""See config.pbtxt: a traced BLS caller (sync call, own span, OpenTelemetry span, stream)."""

import numpy as np

import triton_python_backend_utils as pb_utils
from modelyard import tracing

try:
    from opentelemetry import trace as otel_trace
except ImportError:  # the OpenTelemetry API is optional for models
    otel_trace = None


class TritonPythonModel:
    def execute(self, requests):
        return [self._one(request) for request in requests]

    def _one(self, request):
        context = request.trace().get_context()
        with tracing.span("prepare", {"step": 1}):
            inner = pb_utils.InferenceRequest(
                model_name="add_sub",
                requested_output_names=["OUTPUT0"],
                inputs=[
                    pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                    pb_utils.get_input_tensor_by_name(request, "INPUT1"),
                ],
                trace=request.trace(),
            ).exec()
        if inner.has_error():
            return pb_utils.InferenceResponse(error=inner.error())
        if otel_trace is not None:
            with otel_trace.get_tracer("trace_caller").start_as_current_span("otel_api"):
                pass
        count = pb_utils.get_input_tensor_by_name(request, "COUNT")
        streamed = 0
        stream = pb_utils.InferenceRequest(
            model_name="repeat",
            requested_output_names=["OUT"],
            inputs=[pb_utils.Tensor("COUNT", count.as_numpy())],
        ).exec(decoupled=True)
        for response in stream:
            if response.has_error():
                return pb_utils.InferenceResponse(error=response.error())
            if response.output_tensors():
                streamed += 1
        return pb_utils.InferenceResponse(
            [
                pb_utils.get_output_tensor_by_name(inner, "OUTPUT0"),
                pb_utils.Tensor("STREAMED", np.array([streamed], dtype=np.int32)),
                pb_utils.Tensor("CONTEXT", np.array([(context or "").encode()], dtype=np.object_)),
            ]
        )
