"""The supervisor's restart policy: exponential backoff that resets after a stable run, and crash loops."""

from __future__ import annotations

from shared.restarts import CrashHistory, GiveUp, Restart, RestartPolicy


def test_the_delay_doubles_from_the_first_up_to_the_cap():
    policy = RestartPolicy(first_delay=1.0, max_delay=30.0)
    assert [policy.delay(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    assert policy.delay(10_000) == 30.0


def test_quick_crashes_back_off_until_the_crash_loop_gives_up():
    history = CrashHistory(RestartPolicy(first_delay=1, max_delay=30, crash_loop_crashes=5, crash_loop_window=120))
    decisions = [history.crashed(at=t, uptime=0.5) for t in (0, 2, 5, 10, 19)]
    assert decisions[:4] == [Restart(1, 1), Restart(2, 2), Restart(3, 4), Restart(4, 8)]
    assert decisions[4] == GiveUp(crashes=5, window=120)


def test_crashes_spread_wider_than_the_window_never_give_up():
    history = CrashHistory(RestartPolicy(reset_after=60, crash_loop_crashes=3, crash_loop_window=100))
    decisions = [history.crashed(at=t, uptime=70) for t in range(0, 1000, 71)]
    assert all(isinstance(d, Restart) for d in decisions)


def test_a_child_that_stayed_up_starts_from_the_first_delay_again():
    history = CrashHistory(RestartPolicy(first_delay=1, reset_after=60, crash_loop_crashes=100))
    assert [history.crashed(at=t, uptime=1).delay for t in (0, 3, 8)] == [1, 2, 4]
    assert history.crashed(at=100, uptime=90) == Restart(attempt=1, delay=1)
    assert history.crashed(at=102, uptime=1) == Restart(attempt=2, delay=2)


def test_old_crashes_leave_the_window():
    history = CrashHistory(RestartPolicy(crash_loop_crashes=3, crash_loop_window=10, reset_after=1000))
    assert isinstance(history.crashed(at=0, uptime=0), Restart)
    assert isinstance(history.crashed(at=5, uptime=0), Restart)
    assert isinstance(history.crashed(at=12, uptime=0), Restart)  # the one at 0 is out of the window
    assert history.crashed(at=14, uptime=0) == GiveUp(crashes=3, window=10)


def test_one_allowed_crash_means_no_restarts():
    assert CrashHistory(RestartPolicy(crash_loop_crashes=1)).crashed(at=0, uptime=500) == GiveUp(1, 120.0)
