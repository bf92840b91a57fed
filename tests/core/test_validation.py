"""Request validation: Triton's messages for each kind of bad input."""

from __future__ import annotations

import numpy as np
import pytest

from modelyard.core.validation import IOSpec, ModelSignature, validate
from modelyard.errors import InvalidArgument
from modelyard.types import InferRequest, RequestedOutput, Tensor

SIG = ModelSignature(
    "batched", 8,
    {"INPUT0": IOSpec("INPUT0", "FP32", (4,)), "OPT": IOSpec("OPT", "INT32", (1,), optional=True)},
    {"OUTPUT0": IOSpec("OUTPUT0", "FP32", (4,))},
)  # fmt: skip


def _req(*tensors: Tensor, outputs: list[RequestedOutput] | None = None) -> InferRequest:
    return InferRequest("batched", list(tensors), outputs=outputs)


def _raw(name: str, dt: str, shape: tuple[int, ...], nbytes: int) -> Tensor:
    return Tensor(name, dt, shape, raw=bytes(nbytes))


def test_valid_request_decodes_raw_bytes() -> None:
    req = _req(_raw("INPUT0", "FP32", (2, 4), 32))
    assert validate(req, SIG) is None
    data = req.inputs[0].data
    assert data is not None and data.shape == (2, 4) and data.dtype == np.float32


def test_requested_outputs_are_returned() -> None:
    req = _req(_raw("INPUT0", "FP32", (1, 4), 16), outputs=[RequestedOutput("OUTPUT0")])
    assert validate(req, SIG) == ["OUTPUT0"]


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        (_raw("NOPE", "FP32", (1, 4), 16), "unexpected inference input 'NOPE' for model 'batched'"),
        (_raw("INPUT0", "INT32", (1, 4), 16),
         "inference input 'INPUT0' data-type is 'INT32', but model 'batched' expects 'FP32'"),
        (_raw("INPUT0", "FP32", (1, 3), 12),
         "unexpected shape for input 'INPUT0' for model 'batched'. Expected [-1,4], got [1,3]."),
        (_raw("INPUT0", "FP32", (1, 4), 12),
         "input byte size mismatch for input 'INPUT0' for model 'batched'. Expected 16, got 12"),
        (_raw("INPUT0", "FP32", (9, 4), 144), "inference request batch-size must be <= 8 for 'batched'"),
    ],
)  # fmt: skip
def test_bad_inputs_name_the_problem(tensor: Tensor, message: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        validate(_req(tensor), SIG)
    assert message in e.value.message


def test_missing_required_input() -> None:
    with pytest.raises(InvalidArgument) as e:
        validate(_req(_raw("OPT", "INT32", (1, 1), 4)), SIG)
    assert e.value.message == (
        "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'batched'. "
        "Got input(s) ['OPT'], but missing required input(s) ['INPUT0']. Please provide all "
        "required input(s)."
    )


def test_extra_input_gets_tritons_count_message() -> None:
    sig = ModelSignature(
        "m", 0, {"A": IOSpec("A", "FP32", (1,)), "B": IOSpec("B", "FP32", (1,))}, {}
    )
    req = InferRequest("m", [_raw(n, "FP32", (1,), 4) for n in ("A", "B", "C")])
    with pytest.raises(InvalidArgument) as e:
        validate(req, sig)
    assert e.value.message == (
        "[request id: <id_unknown>] expected 2 inputs but got 3 inputs for model 'm'. Got input(s) "
        "['C','B','A'], but missing required input(s) ]. Please provide all required input(s)."
    )


def test_unknown_output() -> None:
    with pytest.raises(
        InvalidArgument, match="unexpected inference output 'X' for model 'batched'"
    ):
        validate(_req(_raw("INPUT0", "FP32", (1, 4), 16), outputs=[RequestedOutput("X")]), SIG)


def test_bytes_element_count_checked() -> None:
    sig = ModelSignature("s", 0, {"S": IOSpec("S", "BYTES", (2,))}, {})
    req = InferRequest("s", [Tensor("S", "BYTES", (2,), raw=b"\x01\x00\x00\x00a")])
    with pytest.raises(
        InvalidArgument,
        match="expected 2 string elements for inference input 'S' for model 's', got 1",
    ):
        validate(req, sig)
