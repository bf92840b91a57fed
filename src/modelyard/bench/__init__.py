"""`modelyard bench`: a load generator for any server speaking Triton's HTTP/gRPC protocol.

perf_analyzer's job, pip-installable. This package is a client: it never imports
``modelyard.core`` and works the same against modelyard or Triton.

Modules, from the command line down: ``args`` (flags and their checks), ``model`` (metadata
and config read from the server), ``inputs`` (request tensors: random, zeros, or perf_analyzer's
input-data files), ``wire`` (requests encoded once for HTTP or gRPC), ``senders`` (the asyncio
transports), ``load`` (worker processes and the load they drive), ``pool`` (the parent's
handle on them), ``stats`` (their latencies merged into one record per step), ``report``
(table, JSON, CSV, plot) and ``runner`` (the sweep).

LLM mode (``--endpoint``) streams prompts over generate_stream or the OpenAI API instead and
adds genai-perf's token metrics: ``llm_args`` (its flags), ``llm_setup`` (the model checked,
the requests encoded), ``llm_wire`` (request bodies, events read into token counts),
``llm_sender`` (the server-sent-events transport, the samples a worker keeps) and
``llm_report`` (record fields, table, plot).
"""
