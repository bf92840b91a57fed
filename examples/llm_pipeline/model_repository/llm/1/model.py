import json

import numpy as np

import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _flag(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else bool(tensor.as_numpy().reshape(-1)[0])


def _response(text, prompt_tokens=None, output_tokens=None, parameters=None):
    outputs = [pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], np.object_))]
    if prompt_tokens is not None:
        outputs.append(pb_utils.Tensor("num_input_tokens", np.array([prompt_tokens], np.int32)))
    if output_tokens is not None:
        outputs.append(pb_utils.Tensor("num_output_tokens", np.array([output_tokens], np.int32)))
    return pb_utils.InferenceResponse(outputs, parameters=parameters or {})


async def _call(model, inputs, output):
    """One BLS call's output as a numpy array (its error raised)."""
    request = pb_utils.InferenceRequest(
        model_name=model, inputs=inputs, requested_output_names=[output]
    )
    response = await request.async_exec()
    if response.has_error():
        raise pb_utils.TritonModelException(f"{model}: {response.error().message()}")
    return pb_utils.get_output_tensor_by_name(response, output).as_numpy()


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                await self._generate(request, sender)
            except Exception as e:  # the client gets the error; the model keeps serving
                error = pb_utils.TritonError(str(e))
                sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
        return None

    async def _generate(self, request, sender):
        text_input = pb_utils.get_input_tensor_by_name(request, "text_input")
        prompt = text_input.as_numpy().reshape(-1)[0].decode("utf-8")
        stream = _flag(request, "stream", False)
        echo = not _flag(request, "exclude_input_in_output", False)
        sampling_t = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
        sampling = {}
        if sampling_t is not None:
            sampling = json.loads(sampling_t.as_numpy().reshape(-1)[0] or b"{}")
        max_tokens = int(sampling.get("max_tokens", 16))

        ids = await _call("tokenizer", [pb_utils.Tensor("text_input", text_input.as_numpy())],
                          "input_ids")  # fmt: skip
        generate = pb_utils.InferenceRequest(
            model_name="generator",
            inputs=[
                pb_utils.Tensor("input_ids", ids.astype(np.int64)),
                pb_utils.Tensor("max_tokens", np.array([max_tokens], np.int32)),
            ],
            requested_output_names=["output_ids"],
        )
        if stream and echo:
            sender.send(_response(prompt, len(ids), 0))
        pieces, count, finish = [], 0, "stop"
        async for response in await generate.async_exec(decoupled=True):
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            finish = json.loads(response.parameters() or "{}").get("finish_reason", finish)
            token = pb_utils.get_output_tensor_by_name(response, "output_ids")
            if token is None or sender.is_cancelled():
                continue
            word = (await _call("detokenizer", [pb_utils.Tensor("output_ids", token.as_numpy())],
                                "text_output"))[0].decode("utf-8")  # fmt: skip
            count += 1
            if stream:
                sender.send(_response(" " + word, len(ids) if count == 1 and not echo else None, 1))
            else:
                pieces.append(" " + word)
        done = {"finish_reason": finish}
        if stream:
            sender.send(_response("", parameters=done), flags=FINAL)
        else:
            text = (prompt if echo else "") + "".join(pieces)
            sender.send(_response(text, len(ids), count, done), flags=FINAL)
