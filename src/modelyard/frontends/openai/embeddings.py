"""``POST /v1/embeddings``: each input string is one request to the model (BYTES
``text_input`` in, floating-point ``embedding`` out), run concurrently; ``base64`` encodes
each vector as little-endian float32, as OpenAI does. Usage counts the model's
``num_input_tokens`` when it reports them."""

from __future__ import annotations

import asyncio
import base64
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from modelyard.errors import ModelyardError
from modelyard.frontends.http.request_response import JSON_HEADERS, Request, Response
from modelyard.frontends.openai.catalog import EMBEDDING, Catalog, ServedModel
from modelyard.frontends.openai.errors import from_core
from modelyard.frontends.openai.fields import read_object
from modelyard.frontends.openai.mapping import embedding_inputs
from modelyard.frontends.openai.requests import embedding_request
from modelyard.frontends.openai.results import embedding_of, token_count

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer


async def _embed(core: InferenceServer, model: ServedModel, text: str) -> tuple[Any, int | None]:
    """(the vector, the model's token count or None) of one input."""
    final = None
    try:
        async for response in core.infer_stream(embedding_inputs(model, text)):
            if response.error is not None:
                raise from_core(response.error)
            if response.outputs:
                final = response
            if response.final:
                break
    except ModelyardError as e:
        raise from_core(e) from None
    if final is None:
        return [], None
    return embedding_of(final), token_count(final, "num_input_tokens")


async def handle_embeddings(
    core: InferenceServer, catalog: Catalog, request: Request, max_input_size: int
) -> Response:
    doc = await read_object(request, max_input_size)
    emb_request = embedding_request(doc)
    model = catalog.find(emb_request.model, EMBEDDING)
    request.cancel_on_disconnect()
    results = await asyncio.gather(*(_embed(core, model, t) for t in emb_request.inputs))
    data = []
    for i, (vector, _) in enumerate(results):
        value: Any = vector
        if emb_request.base64:
            value = base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
        data.append({"object": "embedding", "index": i, "embedding": value})
    counts = [c for _, c in results]
    usage = None
    if all(c is not None for c in counts):
        total = sum(c for c in counts if c is not None)
        usage = {"prompt_tokens": total, "total_tokens": total}
    body = {"object": "list", "data": data, "model": emb_request.model, "usage": usage}
    return Response(orjson.dumps(body), 200, JSON_HEADERS)
