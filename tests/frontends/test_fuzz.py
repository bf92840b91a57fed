"""Fuzz tests, with hypothesis on a fixed budget (derandomized: the same examples every run).

* The HTTP JSON/binary request codec, the response codec (round trip through tritonclient's
  own parser), compression, and the gRPC request decoding run as pure functions on thousands
  of generated and mutated inputs: they may only raise ModelyardError, with a status that is
  4xx unless Triton itself answers 5xx for that case.
* The HTTP framing is driven over real sockets against the real server (request lines,
  headers, lengths, chunking, encodings, bodies), and gRPC over a real channel: every answer
  is a well-formed response, never a 5xx outside Triton's own, the connection never hangs
  (each read has a bound), and the server keeps serving real clients afterwards.

Triton answers 5xx itself (``TRITON_5XX``; docs/reference/security.md, "Errors that are
5xx") for: malformed JSON and JSON member type errors (500), a 'data' array whose element
count does not match its shape (500), a model's own execution error (500), a load of a model
the repository does not have (500), a shared-memory key that cannot be opened (500), an
unsupported Content-Encoding, a decoupled model on /infer, a repository name, log or trace
file changes (501), and model control outside explicit mode or a bad log format (503).
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.http as httpclient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2
from tritonclient.http import InferenceServerClient as HttpClient

from modelyard.errors import ErrorCode, ModelyardError
from modelyard.frontends.grpc import proto_convert as grpc_codec
from modelyard.frontends.grpc import wire
from modelyard.frontends.http import compression
from modelyard.frontends.http import infer_body as codec
from modelyard.frontends.http.errors import http_status
from modelyard.types import InferResponse, Tensor, numpy_dtype
from tests.conftest import Serving
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(300)

BOUND_S = 30.0

# Triton's own 5xx answers: (status, pattern of the message).
TRITON_5XX: list[tuple[int, re.Pattern[str]]] = [
    (500, re.compile(r"^failed to parse the request JSON buffer")),
    (500, re.compile(r"attempt to access (JSON |non-existing object member)")),
    (500, re.compile(r"^Unable to parse 'data'")),
    (500, re.compile(r"^Unable to parse JSON bytes array")),
    (500, re.compile(r"^unexpected error on creating Triton parameter$")),
    (500, re.compile(r"^failed to load '")),
    (500, re.compile(r"^Unable to open shared memory region")),
    (501, re.compile(r"^Unsupported compression type$")),
    (501, re.compile(r"^HTTP end point doesn't support models with decoupled")),
    (501, re.compile(r"^'repository_name' specification is not supported$")),
    (501, re.compile(r"file location can not be updated through network protocol$")),
    (503, re.compile(r"^explicit model load / unload is not allowed")),
    (503, re.compile(r"^invalid argument for --log_format")),
]


def assert_status_allowed(status: int, message: str) -> None:
    if status < 500:
        return
    assert any(s == status and p.search(message) for s, p in TRITON_5XX), (status, message)


_FUZZ = settings(
    derandomize=True, database=None, deadline=None, print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                           HealthCheck.data_too_large],
)  # fmt: skip


def fuzz(examples: int) -> settings:
    """The fixed budget of one fuzz test: ``examples`` derandomized examples, no database."""
    return settings(_FUZZ, max_examples=examples)


# -- generated values ----------------------------------------------------------------------------

# A small alphabet with the characters that matter to JSON and HTTP (quotes, escapes, NUL,
# non-ASCII, a lone surrogate): hypothesis's full-Unicode text costs seconds to set up.
ALPHABET = 'aBz09_-/:."\\\x00\x7f é☃😀\ud800'


def text(max_size: int, alphabet: str = ALPHABET) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, max_size=max_size)


def proto_text(max_size: int) -> st.SearchStrategy[str]:
    """Text a protobuf string field can hold (no lone surrogate)."""
    return text(max_size, ALPHABET.replace("\ud800", ""))


DATATYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "BF16", "FP32", "FP64", "BYTES"]  # fmt: skip
json_scalar = (
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | text(6)
)  # fmt: skip
json_value = st.recursive(
    json_scalar,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text(5), inner, max_size=3),
    max_leaves=10,
)
small_shape = st.lists(st.integers(0, 4), max_size=3)


# Strategies are built once here: building them inside a draw costs more than drawing.
_names = st.sampled_from(["IN", "A", "B"]) | json_value
_datatypes = st.sampled_from(DATATYPES) | json_value
_shapes = small_shape | json_value
_kinds = st.sampled_from(["data", "binary", "shm", "none", "both"])
_elements = st.integers(-300, 300) | st.floats(-1e6, 1e6) | st.booleans() | text(3)
_data = (
    st.integers(0, 6).flatmap(lambda n: st.lists(_elements, min_size=n, max_size=n)) | json_value
)
_params = st.dictionaries(text(4), json_value, max_size=2)
_sizes = st.integers(-1, 64) | json_value
_regions = text(4) | json_value
_coin = st.booleans()


@st.composite
def json_input(draw: st.DrawFn) -> Any:
    """An entry of ``inputs``: mostly well-typed members with odd values, sometimes not."""
    item: dict[str, Any] = {
        "name": draw(_names), "datatype": draw(_datatypes), "shape": draw(_shapes),
    }  # fmt: skip
    kind = draw(_kinds)
    if kind in ("data", "both"):
        item["data"] = draw(_data)
    params: dict[str, Any] = dict(draw(_params))
    if kind in ("binary", "both"):
        params["binary_data_size"] = draw(_sizes)
    if kind == "shm":
        params["shared_memory_region"] = draw(_regions)
        params["shared_memory_byte_size"] = draw(_sizes)
    keep_empty: bool = draw(_coin)
    if params or keep_empty:
        item["parameters"] = params
    return item


request_parameters = st.dictionaries(
    st.sampled_from(["sequence_id", "sequence_start", "sequence_end", "priority", "timeout",
                     "binary_data_output", "triton_x", "custom"]),
    json_value, max_size=3,
)  # fmt: skip
json_output = st.fixed_dictionaries(
    {"name": st.sampled_from(["OUT", "SEEN", "X"]) | json_value},
    optional={"parameters": st.dictionaries(
        st.sampled_from(["binary_data", "classification", "shared_memory_region", "x"]),
        json_value, max_size=2)},
)  # fmt: skip
infer_document = st.fixed_dictionaries(
    {},
    optional={
        "id": text(5) | json_value,
        "inputs": st.lists(json_input(), max_size=3) | json_value,
        "outputs": st.lists(json_output, max_size=2) | json_value,
        "parameters": request_parameters | json_value,
    },
)


_damage = st.sampled_from(["none", "none", "none", "cut", "quotes"])
_tails = st.binary(max_size=48)
_header_kinds = st.sampled_from(["none", "json", "json", "odd"])


@st.composite
def infer_body(draw: st.DrawFn) -> tuple[bytes, int | None]:
    """(body, Inference-Header-Content-Length): a JSON document, maybe followed by bytes."""
    doc = json.dumps(draw(infer_document)).encode()
    damage = draw(_damage)
    if damage == "cut":
        doc = doc[: len(doc) // 2]
    elif damage == "quotes":
        doc = doc.replace(b'"', b"'")
    tail = draw(_tails)
    header_kind = draw(_header_kinds)
    header = {"none": None, "json": len(doc), "odd": len(doc) // 3}[header_kind]
    return doc + tail, header


# -- the HTTP codecs as pure functions --------------------------------------------------------


def _expect_modelyard_error(call: Any) -> None:
    try:
        call()
    except ModelyardError as e:
        assert_status_allowed(http_status(e), e.message)


@fuzz(300)
@given(infer_body(), st.integers(1, 1 << 20))
def test_http_request_codec(body: tuple[bytes, int | None], max_input: int) -> None:
    data, header = body
    if header is not None and header > len(data):
        header = len(data)

    def parse() -> None:
        request, _ = codec.parse_infer_request("m", "", memoryview(data), header, max_input)
        for tensor in request.inputs:
            assert tensor.data is not None or tensor.raw is not None or tensor.parameters

    _expect_modelyard_error(parse)


@fuzz(300)
@given(text(12) | st.none(), st.integers(0, 100))
def test_http_header_length(value: str | None, body_length: int) -> None:
    _expect_modelyard_error(lambda: codec.header_length_of(value, body_length))


@fuzz(300)
@given(st.binary(max_size=64), st.sampled_from(DATATYPES), small_shape, st.integers(0, 2))
def test_http_raw_binary_request(data: bytes, datatype: str, dims: list[int], batch: int) -> None:
    spec = ("IN", datatype, tuple(d if d else -1 for d in dims))
    _expect_modelyard_error(lambda: codec.raw_infer_request("m", "", data, spec, batch, 1))


@fuzz(250)
@given(st.binary(max_size=200), st.sampled_from(["gzip", "deflate"]), st.integers(0, 300))
def test_decompress(data: bytes, encoding: str, limit: int) -> None:
    import gzip
    import zlib

    for body in (data, gzip.compress(data)[: len(data)], zlib.compress(data)):
        try:
            out = compression.decompress(body, encoding, limit)
            assert len(out) <= limit
        except ModelyardError as e:
            assert e.code == ErrorCode.INVALID_ARG


@fuzz(200)
@given(text(40))
def test_accept_encoding(value: str) -> None:
    assert compression.response_encoding(value) in ("identity", "gzip", "deflate")


@st.composite
def output_tensor(draw: st.DrawFn) -> Tensor:
    datatype = draw(st.sampled_from(DATATYPES))
    shape = tuple(draw(small_shape))
    count = int(np.prod(shape)) if shape else 1
    array: np.ndarray[Any, Any]
    if datatype == "BYTES":
        values = draw(st.lists(st.binary(max_size=5), min_size=count, max_size=count))
        array = np.array([*values, b""], dtype=np.object_)[:count].reshape(shape)
    else:
        raw = draw(st.binary(min_size=count * 8, max_size=count * 8))
        dtype = np.dtype(np.uint16) if datatype == "BF16" else numpy_dtype(datatype)
        array = np.frombuffer(raw, dtype=np.uint8)[: count * np.dtype(dtype).itemsize]
        if datatype == "BOOL":
            array = (array != 0).reshape(shape)
        else:
            array = array.view(dtype).reshape(shape).copy()
    return Tensor(draw(st.sampled_from(["OUT", "SEEN", "X"])), datatype, shape, data=array)


def _bytes_of(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


@fuzz(250)
@given(st.lists(output_tensor(), min_size=1, max_size=3, unique_by=lambda t: t.name), st.booleans())
def test_http_response_codec_round_trip(outputs: list[Tensor], binary: bool) -> None:
    """What the encoder produces, tritonclient's parser reads back unchanged (or the encoder
    refuses with 400: FP16/BF16 or non-UTF-8 BYTES as JSON, as Triton does)."""
    response = InferResponse("m", "1", "id", outputs=outputs)
    try:
        header, parts, total = codec.encode_infer_response(response, codec.OutputPlan(binary))
    except ModelyardError as e:
        assert http_status(e) == 400
        return
    body = b"".join([header, *parts])
    result = HttpClient.parse_response_body(body, header_length=len(header) if total else None)
    for tensor in outputs:
        got = result.as_numpy(tensor.name)
        assert got is not None and got.shape == tensor.shape
        expected = tensor.data
        assert expected is not None
        if tensor.datatype == "BF16" or got.dtype == np.object_:
            assert got.size == expected.size
        else:
            np.testing.assert_array_equal(_bytes_of(got), _bytes_of(expected))


# -- gRPC decoding as pure functions ----------------------------------------------------------

infer_parameter = st.one_of(
    st.builds(service_pb2.InferParameter, bool_param=st.booleans()),
    st.builds(service_pb2.InferParameter, int64_param=st.integers(-(2**63), 2**63 - 1)),
    st.builds(service_pb2.InferParameter, uint64_param=st.integers(0, 2**64 - 1)),
    st.builds(service_pb2.InferParameter, string_param=proto_text(4)),
    st.builds(service_pb2.InferParameter, double_param=st.floats(allow_nan=False)),
)
parameter_keys = st.sampled_from([
    "sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "classification",
    "shared_memory_region", "shared_memory_byte_size", "shared_memory_offset",
    "triton_enable_empty_final_response", "triton_x", "custom",
])  # fmt: skip
CONTENT_FIELDS = ["bool_contents", "int_contents", "int64_contents", "uint_contents",
                  "uint64_contents", "fp32_contents", "fp64_contents", "bytes_contents"]  # fmt: skip


@st.composite
def grpc_request(draw: st.DrawFn) -> bytes:
    msg = service_pb2.ModelInferRequest(
        model_name=draw(st.sampled_from(["http_gate", "", "nosuch"])),
        model_version=draw(st.sampled_from(["", "1", "2", "x", "-1"])),
        id=draw(proto_text(4)),
    )
    for key, value in draw(st.dictionaries(parameter_keys, infer_parameter, max_size=3)).items():
        msg.parameters[key].CopyFrom(value)
    for _ in range(draw(st.integers(0, 3))):
        t = msg.inputs.add(name=draw(st.sampled_from(["IN", "X"])),
                           datatype=draw(st.sampled_from([*DATATYPES, "", "FP8"])),
                           shape=draw(st.lists(st.integers(-2, 4), max_size=3)))  # fmt: skip
        for key, value in draw(
            st.dictionaries(parameter_keys, infer_parameter, max_size=2)
        ).items():
            t.parameters[key].CopyFrom(value)
        if draw(st.booleans()):
            field = draw(st.sampled_from(CONTENT_FIELDS))
            if field == "bytes_contents":
                getattr(t.contents, field).extend(draw(st.lists(st.binary(max_size=3), max_size=4)))
            elif field == "bool_contents":
                getattr(t.contents, field).extend(draw(st.lists(st.booleans(), max_size=4)))
            elif field.startswith("fp"):
                getattr(t.contents, field).extend(draw(st.lists(st.floats(-1e3, 1e3), max_size=4)))
            else:
                getattr(t.contents, field).extend(draw(st.lists(st.integers(0, 100), max_size=4)))
    for _ in range(draw(st.integers(0, 2))):
        msg.outputs.add(name=draw(st.sampled_from(["OUT", "Y"])))
    msg.raw_input_contents.extend(draw(st.lists(st.binary(max_size=16), max_size=3)))
    if draw(st.booleans()):  # large enough for the wire scan instead of protobuf alone
        msg.raw_input_contents.append(bytes(wire.SCAN_THRESHOLD))
    data = msg.SerializeToString()
    mutation = draw(st.sampled_from(["none", "none", "truncate", "flip", "append"]))
    if mutation == "truncate":
        data = data[: draw(st.integers(0, len(data)))]
    elif mutation == "flip" and data:
        i = draw(st.integers(0, len(data) - 1))
        data = data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1 :]
    elif mutation == "append":
        data += draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


@fuzz(300)
@given(grpc_request() | st.binary(max_size=64))
def test_grpc_request_decoding(data: bytes) -> None:
    parsed = wire.parse_infer_request(data)  # never raises
    if parsed.error:
        assert parsed.error.startswith("Unable to parse request: ")
        return
    try:
        grpc_codec.decode_infer_request(parsed)
    except ModelyardError as e:
        assert e.code == ErrorCode.INVALID_ARG, e


# -- over real sockets -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(
        None, "--model-control-mode=explicit", "--load-model=http_gate",
        "--http-read-timeout=1", "--http-idle-timeout=1", "--http-max-header-size=8192",
        "--http-max-body-size=200000", models=["http_gate"], endpoints=("http", "grpc"),
    ) as srv:  # fmt: skip
        yield srv


PATHS = [
    "/v2", "/v2/health/live", "/v2/health/ready", "/v2/models/http_gate",
    "/v2/models/http_gate/ready", "/v2/models/http_gate/config", "/v2/models/http_gate/stats",
    "/v2/models/http_gate/infer", "/v2/models/http_gate/versions/1/infer",
    "/v2/models/http_gate/versions/x/infer", "/v2/models/nosuch/infer",
    "/v2/models/http_gate/generate", "/v2/models/http_gate/generate_stream",
    "/v2/models/stats", "/v2/repository/index", "/v2/systemsharedmemory/status",
    "/v2/systemsharedmemory/region/r/register", "/v2/cudasharedmemory/status",
    "/v2/trace/setting", "/", "/v2/models/%ff/infer", "/v2/models/http_gate/infer?x=1",
]  # fmt: skip
token = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=8)


def usually(common: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``common`` nine times in ten, ``odd`` otherwise: most requests get past the parser."""
    return st.integers(0, 9).flatmap(lambda n: odd if n == 0 else common)


_methods = usually(st.sampled_from(["GET", "POST", "POST", "PUT", "HEAD"]), token)
_paths = usually(st.sampled_from(PATHS), token.map(lambda t: "/" + t))
_versions = usually(st.just("HTTP/1.1"), st.sampled_from(["HTTP/1.0", "HTTP/2.0", "XYZ", ""]))
_header_names = usually(
    st.sampled_from([b"Content-Encoding", b"Accept-Encoding", b"Expect", b"X-Any"]),
    token.map(str.encode),
)
_header_values = usually(
    st.sampled_from([b"gzip", b"deflate", b"br", b"identity", b"100-continue", b"gzip;q=0.5, x"]),
    st.binary(max_size=8).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")),
)
_extra_headers = st.lists(st.tuples(_header_names, _header_values), max_size=2)
_framings = st.sampled_from(["length"] * 6 + ["chunked", "none", "short"])
_raw_bodies = st.binary(max_size=64)


@st.composite
def http_request(draw: st.DrawFn) -> bytes:
    """Raw request bytes: a request line, headers, then a body framed one of several ways."""
    method, path, version = draw(_methods), draw(_paths), draw(_versions)
    if draw(st.integers(0, 3)):
        body, header_length = draw(infer_body())
    else:
        body, header_length = draw(_raw_bodies), None
    headers = [(b"Host", b"t"), (b"Connection", b"close")]
    if header_length is not None:
        headers.append((b"Inference-Header-Content-Length", str(header_length).encode()))
    headers += draw(_extra_headers)
    framing = draw(_framings)
    if framing == "length":
        headers.append((b"Content-Length", b"%d" % len(body)))
    elif framing == "short":
        headers.append((b"Content-Length", b"%d" % (len(body) // 2)))
    elif framing == "chunked":
        headers.append((b"Transfer-Encoding", b"chunked"))
        body = (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n"
    head = b"%s %s %s\r\n" % (method.encode(), path.encode(), version.encode())
    return head + b"".join(b"%s: %s\r\n" % h for h in headers) + b"\r\n" + body


def _exchange(server: ServerProcess, data: bytes) -> bytes:
    sock = socket.create_connection(("127.0.0.1", server.ports["http"]), timeout=BOUND_S)
    out = b""
    try:
        sock.sendall(data)
        while chunk := sock.recv(65536):
            out += chunk
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        sock.close()
    return out


def _responses(raw: bytes) -> Iterator[tuple[int, str]]:
    """(status, error message) of each response in ``raw`` (pipelined ones included)."""
    while raw:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        assert sep, raw[:200]
        lines = head.split(b"\r\n")
        assert lines[0].startswith(b"HTTP/1.1 "), lines[0]
        status = int(lines[0].split()[1])
        fields = dict(line.split(b": ", 1) for line in lines[1:])
        fields = {k.lower(): v for k, v in fields.items()}
        if b"content-length" in fields:
            length = int(fields[b"content-length"])
            body, raw = rest[:length], rest[length:]
        else:  # chunked (generate_stream) or a body to the close
            body, raw = rest, b""
        message = ""
        if status >= 500 and body.startswith(b"{"):
            message = json.loads(body).get("error", "")
        yield status, message


@fuzz(250)
@given(http_request())
def test_http_framing_over_sockets(server: ServerProcess, data: bytes) -> None:
    for status, message in _responses(_exchange(server, data)):
        assert_status_allowed(status, message)
    assert server.proc.poll() is None


@fuzz(60)
@given(grpc_request() | st.binary(max_size=64))
def test_grpc_messages_over_a_channel(server: ServerProcess, data: bytes) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        try:
            call(data, timeout=BOUND_S)
        except grpc.RpcError as e:
            assert e.code() not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), (
                e.code(), e.details(),
            )  # fmt: skip


def test_server_serves_after_the_fuzz(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=BOUND_S)
    try:
        inp = httpclient.InferInput("IN", [2], "FP32")
        inp.set_data_from_numpy(np.array([1.0, 2.0], np.float32))
        assert client.infer("http_gate", [inp]).as_numpy("OUT").tolist() == [1.0, 2.0]
    finally:
        client.close()
    assert "internal error" not in server.output()
    assert "Exception in ASGI application" not in server.output()
