"""The OpenAI-compatible frontend (``--openai-port``): ``/v1/models``, ``/v1/completions``,
``/v1/chat/completions`` and ``/v1/embeddings`` over the same core API as the HTTP and gRPC
frontends, for every model following Triton's vLLM-backend convention (a BYTES
``text_input`` in, a BYTES ``text_output`` out) or TensorRT-LLM's separate inputs, and for
embedding models (BYTES ``text_input`` in, FP32 ``embedding`` out). See docs/openai.md."""
