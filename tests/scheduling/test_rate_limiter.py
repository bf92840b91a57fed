"""The rate limiter alone (scheduling/rate_limiter.py): resources, staging, priorities and
registration errors with Triton's texts (its core's rate_limiter.cc)."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from modelyard.errors import InvalidArgument
from modelyard.scheduling.rate_limiter import (
    GLOBAL_DEVICE,
    INITIAL_EXECUTIONS,
    PER_DEVICE,
    InstanceLimits,
    RateLimiter,
    RateLimitSettings,
    ResourceAsk,
    Ticket,
    instance_limits,
)


def limits(*resources: tuple[str, int] | tuple[str, int, bool], priority: int = 1,
           device: int = 0) -> InstanceLimits:  # fmt: skip
    return InstanceLimits(tuple(ResourceAsk(*r) for r in resources), priority, device)


def one(limiter: RateLimiter, name: str, lim: InstanceLimits) -> Ticket:
    return limiter.register([name], [lim])[0]


class Runs:
    """Records grants in order; ``stage`` asks for one."""

    def __init__(self, limiter: RateLimiter) -> None:
        self.limiter = limiter
        self.order: list[str] = []

    def stage(self, ticket: Ticket) -> None:
        self.limiter.request(ticket, lambda: self.order.append(ticket.name))

    def finish(self, ticket: Ticket, again: bool = False) -> None:
        with self.limiter.released(ticket):
            if again:
                self.stage(ticket)


# -- how many of each resource there are --------------------------------------------------------


def test_without_explicit_counts_each_resource_has_the_most_any_instance_asks() -> None:
    rl = RateLimiter()
    one(rl, "a", limits(("R", 1), ("G", 2, True)))
    one(rl, "b", limits(("R", 3), ("G", 1, True)))
    one(rl, "c", limits(("R", 2), device=1))
    assert rl.limits() == {(0, "R"): 3, (1, "R"): 2, (GLOBAL_DEVICE, "G"): 2}


def test_an_explicit_count_below_an_ask_is_refused_with_tritons_text() -> None:
    rl = RateLimiter({PER_DEVICE: {"R": 1}})
    one(rl, "a", limits(("R", 1)))
    with pytest.raises(InvalidArgument) as e:
        one(rl, "b", limits(("R", 2)))
    assert e.value.message == (
        'Resource count for "R" is limited to 1 which will prevent scheduling of one or more '
        "model instances, the minimum required count is 2"
    )
    assert rl.limits() == {(0, "R"): 1}  # the refused instance left nothing behind


def test_with_explicit_counts_a_resource_not_named_has_none() -> None:
    rl = RateLimiter({PER_DEVICE: {"R": 4}})
    with pytest.raises(InvalidArgument, match=r'"S" is limited to 0 .* count is 1$'):
        one(rl, "a", limits(("S", 1)))


def test_an_explicit_device_count_is_for_that_device_only() -> None:
    rl = RateLimiter({10: {"R": 10}})  # Triton's QA: a resource only for device 10
    with pytest.raises(InvalidArgument, match=r'"R" is limited to 0 .* count is 4$'):
        one(rl, "a", limits(("R", 4)))
    rl = RateLimiter({1: {"R": 3}, PER_DEVICE: {"R": 1}})
    one(rl, "a", limits(("R", 3), device=1))  # the larger of the device's and every device's
    one(rl, "b", limits(("R", 1), device=0))
    assert rl.limits() == {(0, "R"): 1, (1, "R"): 3}


def test_a_global_resource_takes_its_count_from_any_device() -> None:
    rl = RateLimiter({3: {"G": 2}, PER_DEVICE: {"G": 5}})
    one(rl, "a", limits(("G", 1, True)))
    assert rl.limits() == {(GLOBAL_DEVICE, "G"): 5}


def test_explicit_counts_replace_the_asks() -> None:
    rl = RateLimiter({PER_DEVICE: {"R": 6}})
    one(rl, "a", limits(("R", 2)))
    assert rl.limits() == {(0, "R"): 6}


def test_one_name_both_global_and_per_device_is_refused() -> None:
    rl = RateLimiter()
    one(rl, "a", limits(("S", 1, True)))
    with pytest.raises(InvalidArgument) as e:
        one(rl, "b", limits(("S", 1)))
    assert e.value.message == (
        'Resource "S" is present as both global and device-specific resource in the model '
        "configuration."
    )


def test_a_versions_instances_register_all_or_none() -> None:
    rl = RateLimiter({PER_DEVICE: {"R": 1}})
    with pytest.raises(InvalidArgument):
        rl.register(["a", "b"], [limits(("R", 1)), limits(("R", 2))])
    assert rl.limits() == {}
    one(rl, "c", limits(("R", 1)))


def test_settings_keep_the_smaller_of_a_repeated_resource_and_wrap_negative_counts() -> None:
    settings = RateLimitSettings(
        "execution_count", (("R", 4, -1), ("R", 2, -1), ("R", 7, 0), ("U", -1, -1))
    )
    assert settings.enabled
    assert settings.explicit() == {PER_DEVICE: {"R": 2, "U": 2**64 - 1}, 0: {"R": 7}}
    assert not RateLimitSettings().enabled


def test_instance_limits_follow_the_instance_groups() -> None:
    cfg = text_format.Parse(
        """
        instance_group [
          { count: 2 kind: KIND_CPU
            rate_limiter { resources [ { name: "R" count: 2 }, { name: "G" global: true
            count: 1 } ] priority: 3 } },
          { count: 1 kind: KIND_GPU gpus: [ 1 ] },
          { kind: KIND_MODEL }
        ]""",
        model_config_pb2.ModelConfig(),
    )
    asked = InstanceLimits((ResourceAsk("R", 2), ResourceAsk("G", 1, True)), 3, 0)
    assert instance_limits(cfg) == [asked, asked, InstanceLimits(device=1), InstanceLimits()]


def test_instance_limits_one_per_listed_gpu_in_creation_order() -> None:
    # Triton creates count x gpus instances: c = 0 on each GPU, then c = 1 on each.
    cfg = text_format.Parse(
        "instance_group [{ count: 2 kind: KIND_GPU gpus: [1, 0] }]", model_config_pb2.ModelConfig()
    )
    assert [i.device for i in instance_limits(cfg)] == [1, 0, 1, 0]


# -- who runs -----------------------------------------------------------------------------------


def test_instances_sharing_a_resource_run_one_at_a_time() -> None:
    rl = RateLimiter()
    a, b = one(rl, "a", limits(("R", 1))), one(rl, "b", limits(("R", 1)))
    runs = Runs(rl)
    runs.stage(a)
    runs.stage(b)
    assert runs.order == ["a"] and rl.allocated() == {(0, "R"): 1}
    runs.finish(a)
    assert runs.order == ["a", "b"]
    runs.finish(b)
    assert rl.allocated() == {}


def test_per_device_resources_of_different_devices_do_not_meet_but_global_ones_do() -> None:
    rl = RateLimiter()
    a, b = one(rl, "a", limits(("R", 1), device=0)), one(rl, "b", limits(("R", 1), device=1))
    runs = Runs(rl)
    runs.stage(a)
    runs.stage(b)
    assert runs.order == ["a", "b"]
    rl = RateLimiter()
    a, b = (one(rl, n, limits(("G", 1, True), device=d)) for n, d in (("a", 0), ("b", 1)))
    runs = Runs(rl)
    runs.stage(a)
    runs.stage(b)
    assert runs.order == ["a"]


def test_the_lowest_scaled_priority_runs_first() -> None:
    rl = RateLimiter()
    hold, a, b = (one(rl, n, limits(("R", 1), priority=p)) for n, p in (("h", 1), ("a", 1),
                                                                         ("b", 2)))  # fmt: skip
    assert (a.scaled_priority, b.scaled_priority) == (INITIAL_EXECUTIONS, 2 * INITIAL_EXECUTIONS)
    runs = Runs(rl)
    runs.stage(hold)
    runs.stage(b)  # staged first, but its priority is 2
    runs.stage(a)
    runs.finish(hold)
    assert runs.order == ["h", "a"]
    runs.finish(a)
    assert runs.order == ["h", "a", "b"]


def test_priority_is_a_weighted_round_robin() -> None:
    rl = RateLimiter()
    a, b = one(rl, "a", limits(("R", 1), priority=1)), one(rl, "b", limits(("R", 1), priority=2))
    runs = Runs(rl)
    runs.stage(a)
    runs.stage(b)
    tickets = {"a": a, "b": b}
    for _ in range(29):  # both always have work: each finished run is staged again
        runs.finish(tickets[runs.order[-1]], again=True)
    assert runs.order == ["a", "a", "b"] * 10  # (a tie goes to the one staged first)


def test_a_released_instance_staged_again_competes_before_the_resources_go_on() -> None:
    rl = RateLimiter()
    a, b = one(rl, "a", limits(("R", 1), priority=1)), one(rl, "b", limits(("R", 1), priority=3))
    runs = Runs(rl)
    runs.stage(a)
    runs.stage(b)
    runs.finish(a, again=True)  # a: 3 executions x 1 < b: 2 x 3
    assert runs.order == ["a", "a"]


def test_priority_zero_counts_as_one_and_ties_go_in_staging_order() -> None:
    rl = RateLimiter()
    hold, b, a = (one(rl, n, limits(("R", 1), priority=p)) for n, p in (("h", 1), ("b", 0),
                                                                         ("a", 1)))  # fmt: skip
    runs = Runs(rl)
    runs.stage(hold)
    runs.stage(b)
    runs.stage(a)
    runs.finish(hold)
    runs.finish(b)
    assert runs.order == ["h", "b", "a"]


def test_the_head_of_the_order_waits_and_so_does_everyone_behind_it() -> None:
    rl = RateLimiter()
    hold = one(rl, "h", limits(("R", 1)))
    big = one(rl, "big", limits(("R", 1), ("S", 1)))
    small = one(rl, "small", limits(("S", 1), priority=5))
    runs = Runs(rl)
    runs.stage(hold)
    runs.stage(big)  # waits for R; small asks only S, which is free, but comes after it
    runs.stage(small)
    assert runs.order == ["h"]
    runs.finish(hold)
    assert runs.order == ["h", "big"]
    runs.finish(big)
    assert runs.order == ["h", "big", "small"]


def test_a_release_lets_every_instance_that_fits_run() -> None:
    rl = RateLimiter()
    wide = one(rl, "wide", limits(("R", 2)))
    x, y = one(rl, "x", limits(("R", 1), priority=2)), one(rl, "y", limits(("R", 1), priority=2))
    runs = Runs(rl)
    runs.stage(wide)
    runs.stage(x)
    runs.stage(y)
    runs.finish(wide)
    assert runs.order == ["wide", "x", "y"]


def test_an_instance_without_resources_still_takes_its_turn() -> None:
    rl = RateLimiter()
    hold = one(rl, "h", limits(("R", 1)))
    waiting = one(rl, "w", limits(("R", 1)))
    free = one(rl, "free", limits(priority=3))
    runs = Runs(rl)
    runs.stage(hold)
    runs.stage(waiting)
    runs.stage(free)  # behind "w" (2 x 1 < 2 x 3), which waits for R
    assert runs.order == ["h"]
    runs.finish(hold)
    assert runs.order == ["h", "w", "free"]


def test_withdrawing_the_head_lets_the_others_run() -> None:
    rl = RateLimiter()
    hold, a, b = (one(rl, n, limits(("R", 1), ("S", 1) if n == "a" else ("T", 1)))
                  for n in ("h", "a", "b"))  # fmt: skip
    runs = Runs(rl)
    runs.stage(hold)  # holds R and T
    runs.stage(a)
    runs.stage(b)
    assert rl.withdraw(a) and not rl.withdraw(a)
    assert runs.order == ["h"]
    runs.finish(hold)
    assert runs.order == ["h", "b"]


def test_a_release_that_did_not_run_is_not_counted() -> None:
    rl = RateLimiter()
    a = one(rl, "a", limits(("R", 1)))
    runs = Runs(rl)
    runs.stage(a)
    with rl.released(a, executed=False):
        pass
    assert a.executions == INITIAL_EXECUTIONS
    runs.stage(a)
    runs.finish(a)
    assert a.executions == INITIAL_EXECUTIONS + 1


def test_unregistering_frees_what_a_running_instance_holds() -> None:
    rl = RateLimiter()
    a, b = one(rl, "a", limits(("R", 1))), one(rl, "b", limits(("R", 1)))
    runs = Runs(rl)
    runs.stage(a)
    runs.stage(b)
    rl.unregister([a])
    assert runs.order == ["a", "b"] and a.state == "removed"
    runs.finish(a)  # its batch ended after all: nothing more comes back
    assert rl.allocated() == {(0, "R"): 1}
    runs.finish(b)
    assert rl.allocated() == {} and rl.limits() == {(0, "R"): 1}
    rl.unregister([b])
    assert rl.limits() == {}


def test_unregistering_lets_a_waiting_instance_go_without_resources() -> None:
    rl = RateLimiter()
    hold, a = one(rl, "h", limits(("R", 1))), one(rl, "a", limits(("R", 1)))
    runs = Runs(rl)
    runs.stage(hold)
    runs.stage(a)
    rl.unregister([a])  # its version stopped while a request waited for it
    assert runs.order == ["h", "a"] and rl.allocated() == {(0, "R"): 1}
    runs.finish(a)
    assert rl.allocated() == {(0, "R"): 1}


def test_a_larger_ask_registered_later_raises_the_limit_for_those_waiting() -> None:
    rl = RateLimiter()
    a, b = one(rl, "a", limits(("R", 1))), one(rl, "b", limits(("R", 1)))
    runs = Runs(rl)
    runs.stage(a)
    runs.stage(b)
    assert runs.order == ["a"]
    one(rl, "c", limits(("R", 2)))
    assert runs.order == ["a", "b"]


def test_staging_an_instance_twice_is_a_bug() -> None:
    rl = RateLimiter()
    a = one(rl, "a", limits())
    rl.request(a, lambda: None)
    with pytest.raises(RuntimeError):
        rl.request(a, lambda: None)
