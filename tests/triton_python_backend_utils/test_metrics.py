"""Custom metrics: MetricFamily / Metric rules and the in-process values."""

from __future__ import annotations

import gc
import uuid

import pytest

import triton_python_backend_utils as pb
from triton_python_backend_utils import _metrics


def _name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def test_counter_and_gauge() -> None:
    name = _name("requests_total")
    family = pb.MetricFamily(name, "Number of requests", pb.MetricFamily.COUNTER)
    counter = family.Metric(labels={"model": "m", "version": "1"})
    counter.increment(2)
    counter.increment(0.5)
    assert counter.value() == 2.5
    same = family.Metric(labels={"version": "1", "model": "m"})
    assert same.value() == 2.5  # same labels, same series
    with pytest.raises(pb.TritonModelException, match="non-negative"):
        counter.increment(-1)
    with pytest.raises(pb.TritonModelException, match="does not support Set"):
        counter.set(3)
    with pytest.raises(pb.TritonModelException, match="does not support Observe"):
        counter.observe(3)
    gauge_family = pb.MetricFamily(_name("g"), "a gauge", pb.MetricFamily.GAUGE)
    gauge = gauge_family.Metric()
    gauge.increment(5)
    gauge.increment(-2)
    assert gauge.value() == 3
    gauge.set(10)
    assert gauge.value() == 10
    with pytest.raises(TypeError):
        gauge.set("1")  # type: ignore[arg-type]
    snap = {f["name"]: f for f in _metrics.snapshot()}
    assert snap[name]["kind"] == "counter"
    assert snap[name]["series"] == [{"labels": {"model": "m", "version": "1"}, "value": 2.5}]


def test_histogram() -> None:
    name = _name("latency")
    family = pb.MetricFamily(name, "latency", pb.MetricFamily.HISTOGRAM)
    with pytest.raises(
        pb.TritonModelException, match=r"^Failed to create metric\. Missing required buckets\.$"
    ):
        family.Metric(labels={})
    hist = family.Metric(labels={"m": "x"}, buckets=[1.0, 2.0, 5.0])
    for v in (0.5, 1.0, 1.5, 10):
        hist.observe(v)
    with pytest.raises(pb.TritonModelException, match="does not support Increment"):
        hist.increment(1)
    with pytest.raises(pb.TritonModelException, match="does not support Value"):
        hist.value()
    series = next(f for f in _metrics.snapshot() if f["name"] == name)["series"][0]
    assert series["counts"] == [2, 1, 0, 1]
    assert series["count"] == 4
    assert series["sum"] == 13.0
    with pytest.raises(pb.TritonModelException, match="increasing"):
        family.Metric(buckets=[2.0, 1.0])
    assert family.Metric(buckets=[]) is not None


def test_family_argument_errors() -> None:
    with pytest.raises(TypeError):
        pb.MetricFamily(None, "d", pb.MetricFamily.COUNTER)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        pb.MetricFamily("n", None, pb.MetricFamily.COUNTER)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        pb.MetricFamily("n", "d", 0)  # type: ignore[arg-type]
    with pytest.raises(pb.TritonModelException, match="Error when creating MetricFamily"):
        pb.MetricFamily("bad name", "d", pb.MetricFamily.COUNTER)
    name = _name("kinds")
    pb.MetricFamily(name, "d", pb.MetricFamily.COUNTER)
    pb.MetricFamily(name, "other description", pb.MetricFamily.COUNTER)
    with pytest.raises(pb.TritonModelException, match="Error when creating MetricFamily"):
        pb.MetricFamily(name, "d", pb.MetricFamily.GAUGE)


def test_metric_argument_errors() -> None:
    family = pb.MetricFamily(_name("args"), "d", pb.MetricFamily.GAUGE)
    with pytest.raises(
        pb.TritonModelException, match=r"^Failed to create metric\. Labels must be a dictionary\.$"
    ):
        family.Metric(labels=[("a", "b")])  # type: ignore[arg-type]
    with pytest.raises(
        pb.TritonModelException, match=r"^Failed to create metric\. Buckets must be a list\.$"
    ):
        family.Metric(buckets=(1.0,))  # type: ignore[arg-type]
    with pytest.raises(
        pb.TritonModelException, match=r"^Failed to create metric\. Unexpected buckets found\.$"
    ):
        family.Metric(buckets=[1.0])
    with pytest.raises(TypeError):
        pb.Metric()


def test_metric_after_family_deleted() -> None:
    family = pb.MetricFamily(_name("gone"), "d", pb.MetricFamily.GAUGE)
    metric = family.Metric()
    del family
    gc.collect()
    with pytest.raises(pb.TritonModelException, match="'MetricFamily' has been deleted"):
        metric.set(1)
    with pytest.raises(pb.TritonModelException, match="'MetricFamily' has been deleted"):
        metric.value()
