"""The cloud endpoints Triton serves on ports of their own: SageMaker's (``/ping``,
``/invocations``, ``--allow-sagemaker``) and Vertex AI's (its predict and health routes,
``--allow-vertex-ai``). Both translate a request into the KServe route it stands for and hand
it to the HTTP frontend's handlers (``frontends.http.server.kserve_app``), so inference,
errors and statistics are the HTTP endpoint's; what differs is how the binary extension's
JSON length travels (a ``Content-Type`` parameter), that bodies are never compressed, and that
no API is restricted and no header forwarded (Triton's cloud endpoints do neither)."""
