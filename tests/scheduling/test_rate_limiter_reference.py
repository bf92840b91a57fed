"""The rate limiter against the reference Triton 2.51: the same rl_* repository and flags on
both servers, the same observations (who waits, in which order, batch sizes, load errors,
the config JSON). Skipped without the reference."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Serving
from tests.reference import reference_available, start_reference
from tests.scheduling import rate_limit_probes as rl
from tests.scheduling.rate_limit_probes import Probe

pytestmark = [
    pytest.mark.reference,
    pytest.mark.skipif(not reference_available(), reason="reference Triton is not installed"),
]

ON = ("--rate-limit=execution_count",)
# rl_mixed fails to load: Triton would exit, and its readiness would wait for it.
KEEP_SERVING = ("--exit-on-error=false", "--strict-readiness=false")


def both(
    serving: Serving,
    tmp_path: Path,
    models: tuple[str, ...],
    flags: tuple[str, ...],
    observe: Callable[[Probe], Any],
) -> tuple[Any, Any]:
    """``observe`` on modelyard, then on the reference, each over its own copy of the models."""
    seen = []
    for name in ("modelyard", "triton"):
        repo = serving.repo(models, copy=True)
        work = tmp_path / name
        work.mkdir()
        if name == "modelyard":
            with serving.server(repo, *flags) as srv:
                seen.append(observe(Probe(srv.http_url, srv.metrics_url, work)))
        else:
            ref = start_reference(repo, *flags)
            try:
                seen.append(observe(Probe(ref.http_url, ref.metrics_url, work)))
            finally:
                ref.stop()
    return seen[0], seen[1]


def _scenarios(probe: Probe) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, scenario in {
        "waits": rl.waits_for_the_holder,
        "priority": rl.priority_order,
        "batch": rl.batch_while_waiting,
        "sequence": rl.sequence_waits,
    }.items():
        step = probe.tmp / name
        step.mkdir()
        out[name] = scenario(Probe(probe.http_url, probe.metrics_url, step))
    out["one at a time under load"] = rl.one_at_a_time(
        rl.under_load(Probe(probe.http_url, probe.metrics_url, probe.tmp))
    )
    out["rl_mixed"] = rl.index_reasons(probe.http_url)["rl_mixed"]
    out["configs"] = {m: rl.config_json(probe.http_url, m) for m in ("rl_a", "rl_b")}
    return out


def test_who_waits_and_in_which_order(serving: Serving, tmp_path: Path) -> None:
    mine, theirs = both(serving, tmp_path, rl.MODELS, (*ON, *KEEP_SERVING), _scenarios)
    assert mine == theirs
    assert mine["priority"] == ["rl_hold", "rl_a", "rl_b"]
    assert mine["batch"] == [3, 3, 3] and mine["one at a time under load"]


def test_the_same_load_errors(serving: Serving, tmp_path: Path) -> None:
    def loads(probe: Probe) -> dict[str, str]:
        return {m: rl.load_error(probe.http_url, m) for m in ("rl_big", "rl_mixed", "rl_a")}

    flags = (*ON, "--rate-limit-resource=R:1", "--model-control-mode=explicit")
    mine, theirs = both(serving, tmp_path, ("rl_a", "rl_big", "rl_mixed"), flags, loads)
    assert mine == theirs
    assert "is limited to 1" in mine["rl_big"] and mine["rl_a"] == ""


def test_off_runs_them_together(serving: Serving, tmp_path: Path) -> None:
    mine, theirs = both(
        serving, tmp_path, ("rl_a", "rl_hold"), ("--rate-limit=off",), rl.runs_beside_the_holder
    )
    assert mine == theirs == {"a ran while hold ran": True}
