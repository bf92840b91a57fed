"""The metrics options through the real server: the CPU gauges with and without
--allow-cpu-metrics, latency summaries with their quantiles after requests, counter_latencies,
--allow-metrics=false, and flag values the server refuses."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.conftest import Serving
from tests.helpers import http_input, metric_value, read_metrics, wait_until
from tests.reference import free_ports
from tests.serverproc import ServerProcess, refused_start

pytestmark = pytest.mark.timeout(300)

QUANTILES = "0.5:0.05,0.9:0.01,0.25:0.01"
SUMMARIES = (
    "nv_inference_request_summary_us",
    "nv_inference_queue_summary_us",
    "nv_inference_compute_input_summary_us",
    "nv_inference_compute_infer_summary_us",
    "nv_inference_compute_output_summary_us",
)
LATENCY_COUNTERS = (
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
)


def add(url: str, n: int = 1) -> None:
    with httpclient.InferenceServerClient(url, network_timeout=60) as client:
        for i in range(n):
            a = np.array([1.0, float(i)], np.float32)
            inputs = [http_input("A", a), http_input("B", a)]
            result = client.infer("cloud_add", inputs)
            np.testing.assert_array_equal(result.as_numpy("SUM"), a + a)


def families(text: str) -> dict[str, str]:
    """family name -> its type."""
    return {
        line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE")
    }


@pytest.fixture(scope="module")
def summarised(serving: Serving) -> Iterator[ServerProcess]:
    flags = ("--metrics-config", "summary_latencies=true", "--metrics-config",
             f"summary_quantiles={QUANTILES}", "--metrics-interval-ms", "100")  # fmt: skip
    with serving.server(None, *flags, models=["cloud_add"]) as srv:
        yield srv


def test_cpu_gauges_are_there_and_plausible(summarised: ServerProcess) -> None:
    text = read_metrics(summarised.metrics_url)
    utilization = metric_value(text, "nv_cpu_utilization")
    total = metric_value(text, "nv_cpu_memory_total_bytes")
    used = metric_value(text, "nv_cpu_memory_used_bytes")
    assert utilization is not None and 0.0 <= utilization <= 1.0
    assert total is not None and total > 0
    assert used is not None and 0 < used <= total
    assert families(text)["nv_cpu_utilization"] == "gauge"


def test_summaries_have_the_asked_quantiles_after_requests(summarised: ServerProcess) -> None:
    before = metric_value(read_metrics(summarised.metrics_url),
                          "nv_inference_request_summary_us_count", model="cloud_add")  # fmt: skip
    add(summarised.http_url, 5)
    text = read_metrics(summarised.metrics_url)
    kinds = families(text)
    for name in SUMMARIES:
        assert kinds[name] == "summary"
        assert metric_value(text, f"{name}_count", model="cloud_add") == (before or 0) + 5
        for q in ("0.5", "0.9", "0.25"):
            value = metric_value(text, name, model="cloud_add", version="1", quantile=q)
            assert value is not None and value >= 0, (name, q)
        assert metric_value(text, name, model="cloud_add", quantile="0.99") is None
    median = metric_value(text, SUMMARIES[0], model="cloud_add", quantile="0.5")
    tail = metric_value(text, SUMMARIES[0], model="cloud_add", quantile="0.9")
    assert median is not None and tail is not None and median <= tail
    assert 'version="1",quantile="0.5"}' in text  # the quantile label comes last
    for name in LATENCY_COUNTERS:  # counters stay (counter_latencies defaults to true)
        assert kinds[name] == "counter"


def test_a_summary_with_nothing_in_its_window_is_nan(serving: Serving) -> None:
    with serving.server(None, "--metrics-config", "summary_latencies=true",
                        models=["cloud_add"]) as srv:  # fmt: skip
        text = read_metrics(srv.metrics_url)
    line = 'nv_inference_queue_summary_us{model="cloud_add",version="1",quantile="0.5"} Nan'
    assert line in text.splitlines()
    assert metric_value(text, "nv_inference_queue_summary_us_count", model="cloud_add") == 0


def test_no_cpu_gauges_and_no_latency_counters_when_asked(serving: Serving) -> None:
    flags = ("--allow-cpu-metrics=false", "--metrics-config", "counter_latencies=false")
    with serving.server(None, *flags, models=["cloud_add"]) as srv:
        add(srv.http_url, 2)
        text = read_metrics(srv.metrics_url)
        assert "Collecting CPU metrics" not in srv.output()
    kinds = families(text)
    assert not any(name.startswith("nv_cpu_") for name in kinds)
    assert not any(name in kinds for name in (*LATENCY_COUNTERS, *SUMMARIES))
    assert metric_value(text, "nv_inference_request_success", model="cloud_add") == 2
    assert kinds["nv_inference_pending_request_count"] == "gauge"


def test_no_metrics_port_without_allow_metrics(serving: Serving) -> None:
    (port,) = free_ports(1)
    flags = ("--allow-metrics=false", "--metrics-port", str(port), "--allow-cpu-metrics=true")
    with serving.server(None, *flags, models=["cloud_add"], endpoints=("http", "grpc")) as srv:
        add(srv.http_url)
        assert "Metrics Service" not in srv.output()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_the_cpu_gauges_follow_the_interval(serving: Serving) -> None:
    # Each poll reads /proc/meminfo anew; a server busy loading and answering changes its
    # memory between polls, so the used bytes move while nothing scrapes in between.
    with serving.server(None, "--metrics-interval-ms", "50", models=["cloud_add"]) as srv:
        first = metric_value(read_metrics(srv.metrics_url), "nv_cpu_memory_used_bytes")

        def moved() -> bool:
            add(srv.http_url)
            now = metric_value(read_metrics(srv.metrics_url), "nv_cpu_memory_used_bytes")
            return now != first

        wait_until(moved, what="nv_cpu_memory_used_bytes to change between polls")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--metrics-config", "summary_latencies"),
         "error: argument --metrics-config: --metrics-config option format is "
         "<setting>=<value>. Got summary_latencies"),
        (("--metrics-config", "summary_latencies=yes"),
         "error: argument --metrics-config: summary_latencies must be true or false, got 'yes'"),
        (("--metrics-interval-ms", "-5"),
         "error: argument --metrics-interval-ms: expected a positive number of ms, got '-5'"),
    ],
)  # fmt: skip
def test_bad_metrics_flags_are_refused(
    serving: Serving, flags: tuple[str, ...], message: str
) -> None:
    err = refused_start(serving.repo(["cloud_add"]), *flags)
    assert message in err.splitlines()[-1], err


def test_an_unknown_setting_is_logged_and_ignored(serving: Serving) -> None:
    with serving.server(None, "--metrics-config", "summary_max_age=30",
                        models=["cloud_add"]) as srv:  # fmt: skip
        assert "--metrics-config summary_max_age=30 is ignored" in srv.output()
        assert "nv_inference_request_summary_us" not in read_metrics(srv.metrics_url)
