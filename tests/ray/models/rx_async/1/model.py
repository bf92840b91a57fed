"""BLS calls across the cluster, one kind per ARGS["mode"]:

- fanout: n concurrent async_exec() calls to rx_gate (which answers only once all n are in)
- stream: a decoupled call to rx_count for "count" responses
- hold: a decoupled call to rx_count that streams until cancelled (this request's own
  cancellation must reach it: rx_count then writes ARGS["marker"])
- cancel: a decoupled call to rx_count, cancelled by this model after two responses
- timeout: a call to rx_gate that cannot complete, with a 300 ms timeout
- unknown: a call to a model that does not exist
- version: calls to rx_ver versions 1, 2 and the latest
- load: pb_utils.load_model("rx_lazy"), then a call to it
- sticky: three sequences of three requests each to rx_seq (two replicas)
- near: n calls, one after another, to rx_near (a replica on each node); the nodes that ran them
"""

import asyncio
import json

import numpy as np

import triton_python_backend_utils as pb_utils


def tensor(name, values, dtype=np.float32):
    return pb_utils.Tensor(name, np.array(values, dtype=dtype))


def text(response, name):
    return pb_utils.get_output_tensor_by_name(response, name).as_numpy()[0].decode()


def error(response):
    e = response.error()
    return {"error": e.message(), "code": int(e.code())}


async def fanout(args):
    n = int(args["n"])
    calls = [
        pb_utils.InferenceRequest(
            model_name="rx_gate",
            inputs=[tensor("INPUT0", [i])],
            requested_output_names=["OUTPUT0", "TOGETHER", "NODE"],
            parameters={"group": args["group"], "n": n},
        ).async_exec()
        for i in range(n)
    ]
    results = await asyncio.gather(*calls)
    if any(r.has_error() for r in results):
        return error(next(r for r in results if r.has_error()))
    return {
        "outputs": [
            float(pb_utils.get_output_tensor_by_name(r, "OUTPUT0").as_numpy()[0]) for r in results
        ],
        "together": [
            int(pb_utils.get_output_tensor_by_name(r, "TOGETHER").as_numpy()[0]) for r in results
        ],
        "nodes": sorted({text(r, "NODE") for r in results}),
    }


def count_request(count, parameters=None):
    return pb_utils.InferenceRequest(
        model_name="rx_count",
        inputs=[tensor("COUNT", [count], np.int32)],
        requested_output_names=["OUT", "NODE"],
        parameters=parameters or {},
    )


async def stream(args):
    responses = await count_request(int(args["count"])).async_exec(decoupled=True)
    outs, nodes, errors = [], set(), []
    for r in responses:
        if r.has_error():
            errors.append(r.error().message())
        elif r.output_tensors():
            outs.append(int(pb_utils.get_output_tensor_by_name(r, "OUT").as_numpy()[0]))
            nodes.add(text(r, "NODE"))
    return {"outs": outs, "nodes": sorted(nodes), "errors": errors}


async def hold(args):
    params = {"marker": args["marker"], "started": args["started"]}
    responses = await count_request(-1, params).async_exec(decoupled=True)
    seen = 0
    for _ in responses:
        seen += 1
    return {"seen": seen}


async def cancel(args):
    responses = await count_request(-1, {"marker": args["marker"]}).async_exec(decoupled=True)
    data, last = 0, None
    for r in responses:
        last = r
        if not r.has_error() and r.output_tensors():
            data += 1
            if data == 2:
                responses.cancel()
    report = {"data": data}
    if last is not None and last.has_error():
        report.update(error(last))
    return report


async def timeout(args):
    r = await pb_utils.InferenceRequest(
        model_name="rx_gate",
        inputs=[tensor("INPUT0", [1])],
        requested_output_names=["OUTPUT0"],
        parameters={"group": args["group"], "n": 2},  # a second request never comes
        timeout=300_000,  # microseconds
    ).async_exec()
    return error(r) if r.has_error() else {"error": None}


async def unknown(args):
    r = await pb_utils.InferenceRequest(
        model_name="rx_missing", inputs=[tensor("INPUT0", [1])], requested_output_names=["X"]
    ).async_exec()
    return error(r) if r.has_error() else {"error": None}


async def version(args):
    out = {}
    for key, v in (("v1", 1), ("v2", 2), ("latest", -1)):
        r = await pb_utils.InferenceRequest(
            model_name="rx_ver",
            model_version=v,
            inputs=[tensor("INPUT0", [0])],
            requested_output_names=["OUTPUT0"],
        ).async_exec()
        out[key] = (
            error(r)
            if r.has_error()
            else float(pb_utils.get_output_tensor_by_name(r, "OUTPUT0").as_numpy()[0])
        )
    return out


async def load(args):
    await asyncio.to_thread(pb_utils.load_model, "rx_lazy")
    ready = pb_utils.is_model_ready("rx_lazy")
    r = await pb_utils.InferenceRequest(
        model_name="rx_lazy", inputs=[tensor("INPUT0", [2])], requested_output_names=["OUTPUT0"]
    ).async_exec()
    if r.has_error():
        return {"ready": ready, **error(r)}
    return {
        "ready": ready,
        "output": float(pb_utils.get_output_tensor_by_name(r, "OUTPUT0").as_numpy()[0]),
    }


async def sticky(args):
    out = {}
    for seq in range(3):
        corrid = int(args["base"]) + seq
        replicas, sums = set(), []
        for step in range(3):
            flags = 0
            if step == 0:
                flags |= pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
            if step == 2:
                flags |= pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
            r = await pb_utils.InferenceRequest(
                model_name="rx_seq",
                inputs=[tensor("VALUE", [step + 1], np.int32)],
                requested_output_names=["SUM", "REPLICA"],
                correlation_id=corrid,
                flags=flags,
            ).async_exec()
            if r.has_error():
                return error(r)
            sums.append(int(pb_utils.get_output_tensor_by_name(r, "SUM").as_numpy()[0]))
            replicas.add(int(pb_utils.get_output_tensor_by_name(r, "REPLICA").as_numpy()[0]))
        out[str(corrid)] = {"sums": sums, "replicas": sorted(replicas)}
    return out


async def near(args):
    nodes = []
    for i in range(int(args["n"])):
        r = await pb_utils.InferenceRequest(
            model_name="rx_near", inputs=[tensor("INPUT0", [i])], requested_output_names=["NODE"]
        ).async_exec()
        if r.has_error():
            return error(r)
        nodes.append(text(r, "NODE"))
    return {"nodes": sorted(set(nodes))}


MODES = {
    f.__name__: f
    for f in (fanout, stream, hold, cancel, timeout, unknown, version, load, sticky, near)
}


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            args = json.loads(pb_utils.get_input_tensor_by_name(request, "ARGS").as_numpy()[0])
            report = await MODES[args["mode"]](args)
            info = np.array([json.dumps(report).encode()], dtype=object)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("INFO", info)]))
        return responses
