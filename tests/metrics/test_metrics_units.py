"""The pure parts of the metrics options: --metrics-config as Triton 2.51 reads it, the
summaries' window, the CPU gauges' arithmetic, and the exposition's families and order."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from modelyard.cli.main import build_parser
from modelyard.metrics.exposition import prom_number, render_stats
from modelyard.metrics.host_gauges import CpuSampler, read_cpu_times, read_memory
from modelyard.metrics.options import metrics_address
from modelyard.server_config import ServerConfig
from modelyard.serving.metrics_settings import (
    DEFAULT_QUANTILES,
    MetricsConfigError,
    MetricsSettings,
    apply_settings,
    parse_quantiles,
    split_setting,
)
from modelyard.serving.stats import ModelStats
from modelyard.serving.summaries import SLICE_CAP, LatencySummaries, Summary


def _serve(*flags: str) -> object:
    return build_parser().parse_args(["serve", "repo", *flags])


# -- --metrics-config -----------------------------------------------------------------------


@pytest.mark.parametrize("arg", ["summary_latencies", "a,b=c", "=true", "summary_latencies="])
def test_a_setting_without_its_format_is_refused_with_tritons_message(arg: str) -> None:
    with pytest.raises(MetricsConfigError) as e:
        split_setting(arg)
    assert str(e.value) == f"--metrics-config option format is <setting>=<value>. Got {arg}"


def test_settings_apply_in_order_and_unknown_names_warn() -> None:
    warned: list[str] = []
    pairs = [split_setting(a) for a in (
        "summary_latencies=true", "counter_latencies=false", "summary_quantiles=0.5:0.05",
        "summary_latencies=false", "summary_latencies=true", "nope=1",
    )]  # fmt: skip
    settings = apply_settings(MetricsSettings(), pairs, warned.append)
    assert settings.summary_latencies and not settings.counter_latencies
    assert settings.quantiles == ((0.5, 0.05),)
    assert warned == ["--metrics-config nope=1 is ignored: not a setting Triton 2.51 knows"]


@pytest.mark.parametrize(
    ("text", "why"),
    [("0.5", "no ':'"), ("0.5:x", "two numbers"), ("1.5:0.01", "within [0, 1]"),
     ("0.5:0.05,", "no ':'")],
)  # fmt: skip
def test_bad_quantiles_are_refused(text: str, why: str) -> None:
    with pytest.raises(MetricsConfigError, match=why.replace("[", r"\[")):
        parse_quantiles(text)


def test_triton_compares_true_and_false_exactly() -> None:
    with pytest.raises(MetricsConfigError, match="must be true or false, got 'TRUE'"):
        apply_settings(MetricsSettings(), [("summary_latencies", "TRUE")], print)


def test_flags_become_the_settings_and_cpu_needs_metrics() -> None:
    config = ServerConfig.from_args(
        ["repo", "--metrics-config", "summary_latencies=true", "--metrics-interval-ms", "250"]
    )
    settings = config.core.metrics
    assert settings.summaries and settings.interval_ms == 250 and settings.cpu
    assert settings.quantiles == DEFAULT_QUANTILES
    off = ServerConfig.from_args(["repo", "--allow-metrics=false", "--metrics-config",
                                  "summary_latencies=true", "--metrics-config", "nope=1"])  # fmt: skip
    assert not (off.core.metrics.cpu or off.core.metrics.gpu or off.core.metrics.summaries)
    # (logged once the server's log is set up)
    assert off.warnings == ("--metrics-config nope=1 is ignored: not a setting Triton 2.51 knows",)


def test_the_metrics_address_defaults_to_the_http_address() -> None:
    config = ServerConfig.from_args(["repo", "--http-address", "127.0.0.2"])
    assert config.endpoints.metrics.address == "127.0.0.2"
    config = ServerConfig.from_args(
        ["repo", "--http-address", "127.0.0.2", "--metrics-address", "127.0.0.3"]
    )
    assert config.endpoints.metrics.address == "127.0.0.3"
    assert metrics_address(None, "::1") == "::1" and metrics_address("", "::1") == ""


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--metrics-config", "summary_latencies"],
         "argument --metrics-config: --metrics-config option format is <setting>=<value>. "
         "Got summary_latencies"),
        (["--metrics-config", "summary_quantiles=0.5"], "argument --metrics-config: "),
        (["--metrics-interval-ms", "0"], "argument --metrics-interval-ms: expected a positive"),
        (["--allow-cpu-metrics", "maybe"], "argument --allow-cpu-metrics: "),
    ],
)  # fmt: skip
def test_a_bad_flag_value_is_one_line_naming_the_flag(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        _serve(*flags)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


# -- summaries ------------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_summary_counts_everything_and_quantiles_its_window() -> None:
    clock = _Clock()
    s = Summary(clock=clock)
    assert all(math.isnan(v) for v in s.quantiles([0.5, 0.9]))
    for v in (5, 1, 3, 2, 4, 6):
        s.observe(v)
    assert s.quantiles([0.0, 0.5, 0.9, 1.0]) == [1, 3, 6, 6]
    clock.now += 50  # still in the window (five 12 s steps)
    s.observe(100)
    assert s.quantiles([0.5, 1.0]) == [4, 100]
    clock.now += 12  # the first step has left it
    assert s.quantiles([0.5]) == [100]
    clock.now += 60
    assert math.isnan(s.quantiles([0.5])[0])
    assert (s.count, s.sum) == (7, 121)  # count and sum never forget


def test_past_its_cap_a_step_keeps_a_fair_sample() -> None:
    clock = _Clock()
    s = Summary(clock=clock)
    for v in range(10 * SLICE_CAP):
        s.observe(v)
    clock.now += 12
    for _ in range(100):  # a quiet step: weighted by what each stands for, it hardly counts
        s.observe(0)
    median = s.quantiles([0.5])[0]
    assert abs(median - 5 * SLICE_CAP) < 0.05 * 10 * SLICE_CAP


def test_latency_summaries_follow_tritons_choices() -> None:
    plain, cached = LatencySummaries(), LatencySummaries(cached=True)
    plain.success(0, 1_000, 3_000, 10_000)
    assert plain.request is not None and plain.request.sum == 10
    assert (plain.queue.sum, plain.compute_infer.sum, plain.compute_input.count) == (2, 7, 1)
    assert cached.request is None  # Triton keeps no request summary for a cached model
    cached.hit(4_000, 2_500)
    cached.miss(9_999)
    assert cached.cache_hit is not None and cached.cache_hit.sum == 2
    assert cached.cache_miss is not None and cached.cache_miss.sum == 9
    assert cached.queue.sum == 4


# -- CPU gauges -----------------------------------------------------------------------------


def test_cpu_times_leave_guest_out(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 20 30 40 50 60 70 80 90 100\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    assert read_cpu_times(str(stat)) == ((10, 20, 30, 60, 70, 80), (40, 50))
    stat.write_text("intr 1 2 3\n")
    assert read_cpu_times(str(stat)) is None


def test_memory_used_is_total_less_available(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 1000 kB\nMemFree: 100 kB\nMemAvailable: 400 kB\n")
    assert read_memory(str(meminfo)) == (1024000, 614400)
    meminfo.write_text("MemTotal: 1000 kB\n")
    assert read_memory(str(meminfo)) == (0, 0)


def test_the_sampler_polls_on_a_timer_and_reads_the_machine() -> None:
    cpu = CpuSampler()
    utilization, total, used = cpu.current()
    assert 0.0 <= utilization <= 1.0 and total > 0 and 0 < used <= total

    async def run() -> int:
        polls = 0
        original = cpu.poll

        def counting() -> None:
            nonlocal polls
            polls += 1
            original()

        cpu.poll = counting  # type: ignore[method-assign]
        task = asyncio.ensure_future(cpu.run(20.0))  # every 10 ms
        for _ in range(500):
            await asyncio.sleep(0.01)
            if polls >= 3:
                break
        assert cpu.current() == (cpu.utilization, cpu.memory_total, cpu.memory_used)
        task.cancel()
        return polls

    assert asyncio.run(run()) >= 3


# -- exposition -----------------------------------------------------------------------------


def _families(text: str) -> list[tuple[str, str]]:
    return [tuple(line.split()[2:4]) for line in text.splitlines() if line.startswith("# TYPE")]  # type: ignore[misc]


def test_families_come_by_type_and_none_without_series() -> None:
    assert _families(render_stats([], None).decode()) == [
        ("nv_pinned_memory_pool_total_bytes", "gauge"),
        ("nv_pinned_memory_pool_used_bytes", "gauge"),
    ]
    stats = ModelStats("m", "1")
    stats.summaries = LatencySummaries()
    stats.record_success(0, 1_000, 2_000, 5_000, 1)
    settings = MetricsSettings(summary_latencies=True, quantiles=((0.5, 0.05), (0.25, 0.01)))
    text = render_stats([(stats, 0)], CpuSampler(), settings).decode()
    kinds = [kind for _, kind in _families(text)]
    assert kinds == sorted(kinds, key=["counter", "gauge", "summary"].index)
    assert ("nv_cpu_utilization", "gauge") in _families(text)
    assert 'nv_inference_request_summary_us{model="m",version="1",quantile="0.25"} 5' in text
    assert 'nv_inference_queue_summary_us_count{model="m",version="1"} 1' in text
    quiet = render_stats([(stats, 0)], CpuSampler(), MetricsSettings(cpu=False,
                                                                    counter_latencies=False))  # fmt: skip
    names = [name for name, _ in _families(quiet.decode())]
    assert "nv_cpu_utilization" not in names and "nv_inference_queue_duration_us" not in names
    assert "nv_inference_request_success" in names


def test_a_cached_model_has_tritons_cache_families() -> None:
    stats = ModelStats("c", "1", cache_enabled=True)
    stats.summaries = LatencySummaries(cached=True)
    text = render_stats([(stats, 0)], None, MetricsSettings(summary_latencies=True)).decode()
    names = [name for name, _ in _families(text)]
    assert names.index("nv_cache_num_hits_per_model") < names.index(
        "nv_inference_pending_request_count"
    )
    assert "nv_inference_request_summary_us" not in names
    assert names[-2:] == ["nv_cache_hit_summary_per_model", "nv_cache_miss_summary_per_model"]


def test_numbers_as_prometheus_cpp_writes_them() -> None:
    assert [prom_number(v) for v in (3.0, 0.4623115577889447, math.nan, math.inf, 25276063744)] == [
        "3", "0.4623115577889447", "Nan", "+Inf", "25276063744",
    ]  # fmt: skip
