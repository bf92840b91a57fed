"""What Triton's own QA models (qa/python_models in the server repository) rely on, through the
real server and tritonclient in both execution modes: ``sys.argv`` as Triton's stub gives it
(``['']``), a decoupled BLS iterator resuming where a loop stopped, Triton's text for a BLS
call to a model that is not there, the ``Request timeout: <us>`` line, a model folder with a
relative import, BLS refused outside ``execute``, printed lines kept whole, and
``c_python_backend_utils`` (the name of Triton's compiled module) with its free shared memory
unchanged across a worker restart.

The expected values were read from the reference Triton 2.51 running the QA models (and the
small models here).
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import Serving
from tests.helpers import MODES, Served, final_output, http_input, wait_for_log, wait_until

pytestmark = pytest.mark.timeout(120)

MODELS = [
    "qa_argv", "qa_iter", "bls_square", "qa_multi_file", "bls_driver", "qa_timeout_log",
    "qa_free_memory",
]  # fmt: skip
TIMEOUT_S = 30.0  # every client call is bounded by this
PRINTED = 300  # lines each of a printing model's 4 threads prints


@pytest.fixture(scope="module", params=MODES)
def served(request: pytest.FixtureRequest, serving: Serving) -> Iterator[Served]:
    with serving.server(models=MODELS, mode=request.param) as server:
        yield Served(server, request.param, TIMEOUT_S)


def _out(client: httpclient.InferenceServerClient, model: str, n: int = 1) -> Any:
    res = client.infer(model, [http_input("IN", np.array([n], dtype=np.int32))])
    return res.as_numpy("OUT")


def test_sys_argv_is_the_embedded_interpreters(served: Served) -> None:
    seen = json.loads(_out(served.http(), "qa_argv")[0])
    assert seen["initialize"] == seen["thread"] == seen["execute"] == [""]
    assert seen["argparse"] == {}  # no arguments of the server's or the worker's
    assert seen["unittest"] == [1, True]  # unittest.main(exit=False) ran the model's test


def test_a_decoupled_bls_iterator_resumes_where_a_loop_stopped(served: Served) -> None:
    counts = json.loads(_out(served.http(), "qa_iter")[0])
    # next() then the other 4; all 5 again twice; after a loop broken at 2 and a next(), the
    # 2 not read yet (Triton 2.51: 2, not 5); then all 5 again.
    assert counts["sync"] == [4, 5, 5, 2, 5]
    assert counts["async"] == [5, 2]


def test_a_relative_import_in_the_model_folder_loads(served: Served) -> None:
    assert _out(served.http(), "qa_multi_file")[0] == b"FILE1 FILE2"


def test_bls_to_a_model_that_is_not_there_has_tritons_text(served: Served) -> None:
    for decoupled in (False, True):
        spec = {"model": "non_existent_model", "decoupled": decoupled, "outputs": []}
        res = served.http().infer(
            "bls_driver",
            [
                http_input("SPEC", np.array([json.dumps(spec).encode()], np.object_), "BYTES"),
                http_input("INPUT0", np.zeros(2, np.float32), "FP32"),
            ],
        )
        result = json.loads(res.as_numpy("RESULT")[0])
        assert result["has_error"] is True
        assert result["message"] == (
            "Model non_existent_model - Error when running inference: Failed for execute the "
            "inference request. Model 'non_existent_model' is not ready."
        )
        assert result["code"] == 1  # INTERNAL, as Triton's stub


def test_the_request_timeout_line_is_tritons(served: Served) -> None:
    spec = {"model": "qa_timeout_log", "timeout": 11_000_000_000}
    res = served.http().infer(
        "bls_driver",
        [
            http_input("SPEC", np.array([json.dumps(spec).encode()], np.object_), "BYTES"),
            http_input("INPUT0", np.zeros(2, np.float32), "FP32"),
        ],
    )
    assert json.loads(res.as_numpy("RESULT")[0])["has_error"] is False
    # Triton 2.51: I1127 22:11:02.009626 2634 model.py:42] "Request timeout: 11000000000"
    wait_for_log(
        served.server,
        re.compile(r'^I\d{4} [\d:.]{15} \d+ model\.py:\d+\] "Request timeout: 11000000000"$', re.M),
    )


def test_c_python_backend_utils_free_memory_survives_a_restart(served: Served) -> None:
    # QA "restart": free_memory() read in execute, the stub killed, read again: equal.
    client = served.http()
    before = json.loads(_out(client, "qa_free_memory")[0])
    assert before["same_tensor"] is True
    if served.mode == "in-process":  # no pool: tensors never travel through shared memory
        assert before["free"] == 0 and before["pid"] == served.server.proc.pid
        return
    assert before["free"] > 0 and before["pid"] != served.server.proc.pid
    os.kill(before["pid"], signal.SIGKILL)

    def answer() -> Any:
        try:
            return json.loads(_out(client, "qa_free_memory")[0])
        except InferenceServerException:
            return None  # Triton: "Stub process 'qa_free_memory_0_0' is not healthy."

    after = wait_until(answer, TIMEOUT_S, what="the restarted worker's answer")
    assert after["pid"] != before["pid"]
    assert after["free"] == before["free"]


def test_lines_printed_at_once_by_two_models_stay_whole(serving: Serving) -> None:
    # In-process both models print through the server's own sys.stdout: every line whole,
    # even between threads of one model. (In process mode each worker is a process of its
    # own, as Triton's stubs are.)
    with serving.server(models=["qa_print_a", "qa_print_b"], mode="in-process") as server:

        def prints(model: str) -> Any:  # a client each: a tritonclient is not thread-safe
            client = httpclient.InferenceServerClient(
                server.http_url, connection_timeout=TIMEOUT_S, network_timeout=TIMEOUT_S
            )
            return _out(client, model, PRINTED)

        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(prints, m) for m in ("qa_print_a", "qa_print_b")]
            for f in futures:
                f.result(timeout=TIMEOUT_S)
    lines = [line for line in final_output(server).splitlines() if "qa-print" in line]
    whole = re.compile(r"^qa-print (a) [0-3] \d+ a{200}$|^qa-print (b) [0-3] \d+ b{200}$")
    assert [line for line in lines if not whole.match(line)] == []
    assert len(lines) == 2 * 4 * PRINTED


# -- BLS outside execute --------------------------------------------------------------------

BLS_ONLY_IN_EXECUTE = "BLS is only supported during the 'execute' function."


@pytest.mark.parametrize("mode", MODES)
def test_bls_from_initialize_or_finalize_is_refused(serving: Serving, mode: str) -> None:
    repo = serving.repo(["bls_square", "qa_bls_init", "qa_bls_finalize"])
    with serving.server(repo, "--model-control-mode", "explicit", "--load-model", "bls_square",
                        mode=mode) as server:  # fmt: skip
        client = httpclient.InferenceServerClient(
            server.http_url, connection_timeout=TIMEOUT_S, network_timeout=TIMEOUT_S
        )
        # Triton 2.51: the load fails with the model's TritonModelException.
        with pytest.raises(InferenceServerException) as e:
            client.load_model("qa_bls_init")
        assert BLS_ONLY_IN_EXECUTE in str(e.value.message())
        assert not client.is_model_ready("qa_bls_init")
        # Triton 2.51 logs the exception finalize raised and unloads the model.
        client.load_model("qa_bls_finalize")
        client.unload_model("qa_bls_finalize")
        assert not client.is_model_ready("qa_bls_finalize")
        wait_for_log(server, re.compile(re.escape(BLS_ONLY_IN_EXECUTE) + r".*\(\d+\): finalize"))


def test_finalize_sees_the_same_sys_argv(serving: Serving) -> None:
    for mode in MODES:
        with serving.server(models=["qa_argv"], mode=mode) as server:
            pass
        out = final_output(server)
        match = re.search(r"qa_argv finalize (\[.*\])", out)
        assert match, out
        argv, thread_later = json.loads(match.group(1).replace('\\"', '"'))
        assert argv == thread_later == [""]
