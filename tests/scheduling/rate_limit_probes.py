"""What the rate limiter tests observe of a server (modelyard or the reference Triton) through
tritonclient and the metrics endpoint: the rl_* models (tests/models/rl_a/1/model.py) answer
with the interval of each execution, so the tests compare orders, never durations.

``rl_hold`` holds the shared resource R while its execution waits at a gate (a file the probe
creates); the other requests are sent meanwhile, and the probe waits until the server counts
them pending (``nv_inference_pending_request_count``: Triton counts a request waiting for the
rate limiter as pending, and modelyard too) before it opens the gate.
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http as httpclient

from tests.helpers import WAIT_S, metric_value, read_metrics, wait_until

MODELS = ("rl_a", "rl_b", "rl_hold", "rl_batched", "rl_seq", "rl_mixed")


@dataclass(frozen=True)
class Execution:
    model: str
    start: float
    end: float
    batch: int


class Probe:
    """Requests to one server, each on a thread of its own."""

    def __init__(self, http_url: str, metrics_url: str, tmp: Path) -> None:
        self.http_url, self.metrics_url, self.tmp = http_url, metrics_url, tmp
        self._threads: list[threading.Thread] = []
        self.results: dict[str, Execution] = {}
        self.errors: list[BaseException] = []

    def send(self, key: str, model: str, params: dict[str, Any] | None = None,
             **kwargs: Any) -> None:  # fmt: skip
        """Infer on ``model`` in the background; its execution lands in ``results[key]``."""

        def run() -> None:
            try:
                with httpclient.InferenceServerClient(self.http_url, network_timeout=60) as c:
                    batched = model == "rl_batched" or model == "rl_seq"
                    data = np.array([[1.0]] if batched else [1.0], np.float32)
                    tensor = httpclient.InferInput("IN", list(data.shape), "FP32")
                    tensor.set_data_from_numpy(data)
                    result = c.infer(model, [tensor], parameters=params or None, **kwargs)
                    echo = json.loads(result.as_numpy("ECHO").reshape(-1)[0])
                    self.results[key] = Execution(model, echo["start"], echo["end"], echo["batch"])
            except BaseException as e:  # reported by wait()
                self.errors.append(e)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self._threads.append(thread)

    def wait(self) -> dict[str, Execution]:
        for thread in self._threads:
            thread.join(WAIT_S * 2)
        assert not self.errors, self.errors
        assert not any(t.is_alive() for t in self._threads), "a request did not finish"
        return self.results

    def pending(self, model: str) -> float | None:
        text = read_metrics(self.metrics_url)
        return metric_value(text, "nv_inference_pending_request_count", model=model)

    def wait_pending(self, model: str, count: int) -> None:
        wait_until(lambda: self.pending(model) == count, what=f"{count} pending on {model}")

    def hold(self) -> Path:
        """Start rl_hold's execution and keep it at a gate; returns the gate to open."""
        gate, started = self.tmp / "gate", self.tmp / "hold-started"
        self.send("hold", "rl_hold", {"gate": str(gate), "started": str(started)})
        wait_until(started.exists, what="rl_hold to start")
        return gate


def one_at_a_time(executions: list[Execution]) -> bool:
    """No two executions overlap."""
    ordered = sorted(executions, key=lambda e: e.start)
    return all(b.start >= a.end for a, b in itertools.pairwise(ordered))


# -- the scenarios: each returns what the tests compare ------------------------------------------


def waits_for_the_holder(probe: Probe) -> dict[str, Any]:
    """rl_a sent while rl_hold holds R: pending until the gate opens, then after it."""
    gate = probe.hold()
    probe.send("a", "rl_a")
    probe.wait_pending("rl_a", 1)
    gate.touch()
    done = probe.wait()
    return {"a ran while hold ran": done["a"].start < done["hold"].end}


def runs_beside_the_holder(probe: Probe) -> dict[str, Any]:
    """--rate-limit=off: rl_a runs while rl_hold waits at its gate."""
    gate = probe.hold()
    started = probe.tmp / "a-started"
    probe.send("a", "rl_a", {"started": str(started)})
    try:
        wait_until(started.exists, what="rl_a to start while rl_hold runs")
    finally:
        gate.touch()
    done = probe.wait()
    return {"a ran while hold ran": done["a"].start < done["hold"].end}


def priority_order(probe: Probe) -> list[str]:
    """rl_b (priority 2) and then rl_a (priority 1) wait for R: the order they run in."""
    gate = probe.hold()
    probe.send("b", "rl_b")
    probe.wait_pending("rl_b", 1)
    probe.send("a", "rl_a")
    probe.wait_pending("rl_a", 1)
    gate.touch()
    done = probe.wait()
    assert one_at_a_time(list(done.values())), done
    return [e.model for e in sorted(done.values(), key=lambda e: e.start)]


def batch_while_waiting(probe: Probe) -> list[int]:
    """Three requests for rl_batched (dynamic batcher) wait for R: the batch sizes they ran
    in (one batch: the batch formed while the instance waited)."""
    gate = probe.hold()
    for i in range(3):
        probe.send(f"r{i}", "rl_batched")
    probe.wait_pending("rl_batched", 3)
    gate.touch()
    done = probe.wait()
    assert one_at_a_time([done["hold"], done["r0"]]), done
    return sorted(done[f"r{i}"].batch for i in range(3))


def sequence_waits(probe: Probe) -> bool:
    """A sequence's first request to rl_seq (sequence batcher) waits for R."""
    gate = probe.hold()
    probe.send("s", "rl_seq", sequence_id=7, sequence_start=True, sequence_end=True)
    probe.wait_pending("rl_seq", 1)
    gate.touch()
    done = probe.wait()
    return done["s"].start >= done["hold"].end


def under_load(probe: Probe, per_model: int = 4) -> list[Execution]:
    """Requests to every model sharing R at once, none held: their executions."""
    for model in ("rl_a", "rl_b", "rl_hold"):
        for i in range(per_model):
            probe.send(f"{model}{i}", model)
    return list(probe.wait().values())


def load_error(http_url: str, model: str) -> str:
    """The error text of loading ``model`` (explicit model control)."""
    from tritonclient.utils import InferenceServerException

    with httpclient.InferenceServerClient(http_url) as c:
        try:
            c.load_model(model)
        except InferenceServerException as e:
            return str(e.message())
    return ""


def index_reasons(http_url: str) -> dict[str, str]:
    with httpclient.InferenceServerClient(http_url) as c:
        return {m["name"]: m.get("reason", "") for m in c.get_model_repository_index()}


def config_json(http_url: str, model: str) -> Any:
    with httpclient.InferenceServerClient(http_url) as c:
        return c.get_model_config(model)
