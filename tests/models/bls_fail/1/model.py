import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        # Looked up here, not at import: Triton's stub adds TritonError to pb_utils later.
        codes = {
            "not_found": pb_utils.TritonError.NOT_FOUND,
            "unavailable": pb_utils.TritonError.UNAVAILABLE,
        }
        responses = []
        for request in requests:
            mode = json.loads(request.parameters() or "{}").get("mode", "raise")
            if mode == "raise":
                raise ValueError("plain value error")
            error = pb_utils.TritonError(f"custom {mode}", codes[mode])
            responses.append(pb_utils.InferenceResponse(error=error))
        return responses
