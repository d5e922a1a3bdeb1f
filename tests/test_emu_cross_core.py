"""Known answers of the emulator's cross-core rules (kernel/npu/emu/emu_pipes.cpp, emu_control.cpp).

CrossCoreSetFlag's page (asc-devkit, atlasascendc_api_07_0273) gives no order for consecutive cross-core sets
of one core and a counter range of 0-15; msSanitizer's synccheck reports flags left at kernel exit.  So:

* two sets one core issues back to back reach the receiver in both orders over a fixed list of seeds, and one
  seed replays one order (the core's outbox, drained in a seeded order);
* a counter pushed past 15 is a fault naming the core, the flag and the count;
* an intra-core flag set and never waited, or a cross-core counter not back at 0, is a TRAILING_FLAG fault at
  exit naming the core and the pipe pair (or the cross-core flag id);
* a clean sequence (every set waited, every message consumed) passes the exit check.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator

import pytest
from emu_harness import PIPE, VECTOR, Core, EmuFaultError, emu

#: a seed list fixed in advance: the reorder must show on it, not on a lucky fresh seed
SEEDS = tuple(range(1, 25))
IN_FLIGHT = 8


def ffts_msg(flag: int, mode: int = 2) -> int:
    """The FFTS message word: bit 0 valid, bits 4-7 mode, bits 8-11 flag id (pa_platform.hpp's FftsMsg)."""
    return 1 | (mode << 4) | (flag << 8)


@pytest.fixture
def recorded() -> Iterator[None]:
    """Record the flag id of every cross-core message as it leaves its core; off again afterwards."""
    emu().pa_emu_cross_record(1)
    yield
    emu().pa_emu_cross_record(0)


def sent() -> list[int]:
    out = (ctypes.c_int64 * 64)()
    n = emu().pa_emu_cross_sent(out, 64)
    return list(out[:n])


def two_sets(seed: int, first_pipe: str, second_pipe: str) -> list[int]:
    """Flag 1 then flag 2 set back to back by one vector core; the order their messages left in."""
    core = Core(VECTOR, seed=seed)
    core.reorder(IN_FLIGHT, seed)
    core.call("ffts_cross_core_sync", PIPE[first_pipe], ffts_msg(1))
    core.call("ffts_cross_core_sync", PIPE[second_pipe], ffts_msg(2))
    core.check_exit()  # drains: every queued message leaves
    return sent()


@pytest.mark.parametrize("pipes", [("MTE3", "MTE3"), ("V", "MTE3")], ids=["one pipe", "two pipes"])
def test_two_sets_of_one_core_arrive_in_both_orders_and_a_seed_replays(recorded: None, pipes: tuple[str, str]) -> None:
    orders = {seed: two_sets(seed, *pipes) for seed in SEEDS}
    assert set(map(tuple, orders.values())) == {(1, 2), (2, 1)}, orders
    for seed in SEEDS[:6]:
        assert two_sets(seed, *pipes) == orders[seed], f"seed {seed} did not replay"


def test_in_program_order_the_sets_leave_as_issued(recorded: None) -> None:
    """The contrast: with nothing in flight every message leaves at issue, so only the reorder shows the swap."""
    for seed in SEEDS[:8]:
        core = Core(VECTOR, seed=seed)
        core.reorder(0, seed)
        core.call("ffts_cross_core_sync", PIPE["MTE3"], ffts_msg(1))
        core.call("ffts_cross_core_sync", PIPE["MTE3"], ffts_msg(2))
        core.check_exit()
        assert sent() == [1, 2]


def test_a_counter_past_15_faults_naming_core_flag_and_count() -> None:
    core = Core(VECTOR, seed=3)
    for _ in range(15):
        core.raise_cross(5)
    with pytest.raises(EmuFaultError, match=r"counter of flag 5 on vec core 0\.0 is already 15 \(0-15"):
        core.raise_cross(5)
    core.call("wait_flag_dev", 5)  # one consumed: the counter holds 14, a set fits again
    core.raise_cross(5)
    with pytest.raises(EmuFaultError, match=r"flag 5 .* already 15"):
        core.raise_cross(5)


def test_a_flag_set_and_never_waited_is_trailing_at_exit() -> None:
    core = Core(VECTOR, seed=4)
    core.reorder(IN_FLIGHT, 4)
    core.call("set_flag", PIPE["V"], PIPE["MTE3"], 2)
    core.check_exit(intra=False, cross=True)  # the counters alone are clean
    with pytest.raises(EmuFaultError, match=r"TRAILING_FLAG \(HAZARD\): vec core 0\.0 ends with flag V->MTE3 event 2"):
        core.check_exit(intra=True, cross=False)


def test_a_cross_counter_left_raised_is_trailing_at_exit() -> None:
    core = Core(VECTOR, seed=5)
    core.raise_cross(7)
    core.raise_cross(7)
    core.check_exit(intra=True, cross=False)
    with pytest.raises(EmuFaultError, match=r"TRAILING_FLAG \(HAZARD\): vec core 0\.0 ends with cross-core flag 7's "
                                            r"counter at 2"):
        core.check_exit(intra=False, cross=True)
    core.call("wait_flag_dev", 7)
    with pytest.raises(EmuFaultError, match=r"flag 7's counter at 1"):
        core.check_exit()


@pytest.mark.parametrize("seed", SEEDS[:6])
def test_a_clean_sequence_passes_the_exit_check(recorded: None, seed: int) -> None:
    """Every intra-core set waited (also one whose wait is still queued on its pipe), every message consumed."""
    core = Core(VECTOR, seed=seed)
    core.reorder(IN_FLIGHT, seed)
    core.call("set_flag", PIPE["V"], PIPE["MTE3"], 2)
    core.call("wait_flag", PIPE["V"], PIPE["MTE3"], 2)
    core.call("set_flag", PIPE["MTE3"], PIPE["S"], 1)
    core.call("wait_flag", PIPE["MTE3"], PIPE["S"], 1)
    core.call("ffts_cross_core_sync", PIPE["MTE3"], ffts_msg(3))
    core.raise_cross(3)
    core.call("wait_flag_dev", 3)
    core.check_exit()
    assert sent() == [3]
