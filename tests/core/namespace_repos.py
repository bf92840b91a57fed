"""Two model repositories holding models of the same names, as Triton's L0_model_namespacing
builds them, for the ``--model-namespacing`` tests.

Every model takes INPUT0 and INPUT1 (INT32 [4]) and answers OUTPUT0 and OUTPUT1:

- ``addsub/composing_model``: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1;
  ``subadd/composing_model`` the other way round. Each reads its sign from a sibling module
  imported in ``execute``, so two copies run side by side must each get their own;
- ``addsub/simple_addsub`` and ``subadd/simple_subadd``: an ensemble of one step,
  ``composing_model``;
- ``simple_ensemble`` in both, the same ensemble: a name both repositories hold;
- ``addsub/bls_addsub``: calls ``composing_model`` from ``execute`` (BLS) and answers its
  outputs, or its error.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

COMPOSING = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        import sign  # (imported here: each copy must find its own sibling module)

        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(r, "INPUT1").as_numpy()
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", a + sign.SIGN * b),
                pb_utils.Tensor("OUTPUT1", a - sign.SIGN * b),
            ]))
        return out
"""
BLS = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            call = pb_utils.InferenceRequest(
                model_name="composing_model",
                requested_output_names=["OUTPUT0", "OUTPUT1"],
                inputs=[pb_utils.get_input_tensor_by_name(r, n) for n in ("INPUT0", "INPUT1")],
            )
            resp = call.exec()
            if resp.has_error():
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(resp.error().message())))
            else:
                out.append(pb_utils.InferenceResponse(resp.output_tensors()))
        return out
"""
IO = """max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 4 ] } ]
"""
STEP = """ensemble_scheduling { step [ { model_name: "composing_model" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" }
  output_map { key: "OUTPUT0" value: "OUTPUT0" } output_map { key: "OUTPUT1" value: "OUTPUT1" }
} ] }
"""

INPUT0 = np.array([5, 6, 7, 8], np.int32)
INPUT1 = np.array([0, 1, 2, 3], np.int32)
ADD = (INPUT0 + INPUT1).tolist()  # OUTPUT0 of an add-sub model
SUB = (INPUT0 - INPUT1).tolist()  # OUTPUT0 of a sub-add model


def _python(repo: Path, name: str, code: str, sibling: str = "") -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(code)
    if sibling:
        (repo / name / "1" / "sign.py").write_text(sibling)
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\n{IO}instance_group [ {{ count: 1, kind: KIND_CPU }} ]\n'
    )


def _ensemble(repo: Path, name: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(f'name: "{name}"\nplatform: "ensemble"\n{IO}{STEP}')


def make_repositories(root: Path) -> tuple[Path, Path]:
    """The two repositories (``addsub``, ``subadd``) under ``root``, as absolute real paths
    (a repository's path is its namespace: both servers must be given the same string)."""
    addsub, subadd = root / "addsub", root / "subadd"
    _python(addsub, "composing_model", COMPOSING, "SIGN = 1\n")
    _ensemble(addsub, "simple_addsub")
    _ensemble(addsub, "simple_ensemble")
    _python(addsub, "bls_addsub", BLS)
    _python(subadd, "composing_model", COMPOSING, "SIGN = -1\n")
    _ensemble(subadd, "simple_subadd")
    _ensemble(subadd, "simple_ensemble")
    return addsub.resolve(), subadd.resolve()


def ambiguous(name: str, count: int = 2) -> str:
    """Triton's answer to a request by a name ``count`` loaded models share."""
    return (
        f"There are {count} identifiers of model '{name}' in global map, model namespace must "
        "be provided to resolve ambiguity."
    )
