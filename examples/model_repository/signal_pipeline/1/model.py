"""BLS with data-dependent control flow between a Python model and an ONNX model.

features = signal_features(signal)            # Python preprocessing
scores = signal_classifier(features)          # ONNX Runtime
while max(scores) < CONFIDENT and rounds < MAX_ROUNDS:
    signal = moving_average(signal)           # noise makes the classifier unsure
    ... classify again
label = argmax if confident else "undecided"
"""

import numpy as np

import triton_python_backend_utils as pb_utils

LABELS = ("low", "mid", "high")
CONFIDENT = 0.8
MAX_ROUNDS = 4


class _Failed(Exception):
    def __init__(self, error):
        super().__init__(error.message())
        self.error = error


def _call(model, name, array, output):
    """One BLS call; an error response becomes an exception carrying the callee's error."""
    request = pb_utils.InferenceRequest(
        model_name=model, requested_output_names=[output], inputs=[pb_utils.Tensor(name, array)]
    )
    response = request.exec()
    if response.has_error():
        raise _Failed(response.error())
    return pb_utils.get_output_tensor_by_name(response, output).as_numpy()


def _classify(signal):
    features = _call("signal_features", "SIGNAL", signal, "FEATURES")
    # signal_classifier batches: send one row, get one row back.
    return _call("signal_classifier", "FEATURES", features.reshape(1, 4), "SCORES")[0]


def _smooth(signal):
    if signal.size < 3:
        return signal
    padded = np.pad(signal, 1, mode="edge")
    return ((padded[:-2] + padded[1:-1] + padded[2:]) / 3).astype(np.float32)


class TritonPythonModel:
    def execute(self, requests):
        return [self._one(request) for request in requests]

    def _one(self, request):
        signal = pb_utils.get_input_tensor_by_name(request, "SIGNAL").as_numpy()
        try:
            scores = _classify(signal)
            rounds = 1
            while scores.max() < CONFIDENT and rounds < MAX_ROUNDS:
                signal = _smooth(signal)
                scores = _classify(signal)
                rounds += 1
        except _Failed as e:
            return pb_utils.InferenceResponse(error=e.error)
        if scores.max() >= CONFIDENT:
            label = LABELS[int(scores.argmax())]
        else:
            label = "undecided"
            pb_utils.Logger.log_info(f"signal_pipeline: undecided after {rounds} rounds")
        return pb_utils.InferenceResponse(
            [
                pb_utils.Tensor("LABEL", np.array([label.encode()], dtype=np.object_)),
                pb_utils.Tensor("SCORES", scores.astype(np.float32)),
                pb_utils.Tensor("STEPS", np.array([rounds], dtype=np.int32)),
            ]
        )
