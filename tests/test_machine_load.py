"""labkit.machine_load on hand-made /proc/stat snapshots, clocks and CPU times (worked by hand)."""

import pytest

from labkit.machine_load import describe_load, machine_load, read_cpu_jiffies

STAT = ("cpu  {user} 0 {system} 5000 10 0 {softirq} {steal} 0 0\n"
        "cpu0 1 2 3 4 5 6 7 8 0 0\nintr 12345\n")


def _fake(stats, own_s, walls):
    texts, owns, clocks = iter(stats), iter(own_s), iter(walls)
    return dict(read=lambda path: next(texts), own=lambda: next(owns), clock=lambda: next(clocks))


def test_read_cpu_jiffies_takes_the_all_cpu_line():
    j = read_cpu_jiffies(STAT.format(user=100, system=20, softirq=3, steal=7))
    assert (j["user"], j["system"], j["idle"], j["iowait"], j["softirq"], j["steal"]) == (100, 20, 5000, 10, 3, 7)
    assert read_cpu_jiffies("cpu  1 2 3 4")["steal"] == 0  # an old kernel's shorter line
    with pytest.raises(ValueError, match="no 'cpu' line"):
        read_cpu_jiffies("cpu0 1 2 3\n")


def test_others_steal_and_own_shares_worked_by_hand():
    # 10 s on 2 CPUs (20 CPU-s); busy jiffies grow by 1000 user + 400 system + 100 softirq = 1500 at
    # 100 Hz: 15 CPU-s, of which this process used 12: others 3 / 20; steal grows by 50 jiffies: 0.5 / 20
    before, after = (STAT.format(user=1000, system=100, softirq=10, steal=5),
                     STAT.format(user=2000, system=500, softirq=110, steal=55))
    with machine_load(cpus=2, hz=100, **_fake([before, after], [3.0, 15.0], [100.0, 110.0])) as load:
        assert load["others_frac"] is None  # filled when the block ends
    assert load["wall_s"] == 10.0 and load["cpus"] == 2
    assert load["others_frac"] == pytest.approx(3 / 20) and load["steal_frac"] == pytest.approx(0.5 / 20)
    assert load["own_frac"] == pytest.approx(12 / 20)
    assert describe_load(load) == ("while it ran, other processes used 15% of the machine's 2 CPUs and the "
                                   "hypervisor took 2% (this run 60%, 10 s)")


def test_a_process_busier_than_the_counters_never_makes_others_negative():
    same = STAT.format(user=1000, system=100, softirq=10, steal=5)
    with machine_load(cpus=2, hz=100, **_fake([same, same], [0.0, 0.5], [0.0, 1.0])) as load:
        pass
    assert load["others_frac"] == 0.0 and load["own_frac"] == pytest.approx(0.25)


def test_without_proc_stat_the_load_says_it_was_not_recorded():
    def missing(path):
        raise FileNotFoundError(path)

    with machine_load("/nonexistent/stat", cpus=2, hz=100, read=missing, own=lambda: 0.0,
                      clock=iter([0.0, 5.0]).__next__) as load:
        pass
    assert load["others_frac"] is None and load["wall_s"] == 5.0
    assert "unreadable (FileNotFoundError)" in load["note"]
    assert describe_load(load).startswith("machine load not recorded (/nonexistent/stat unreadable")
    assert describe_load(None) == "machine load not recorded"


def test_on_this_machine_the_shares_are_fractions():
    import time

    with machine_load() as load:  # half a second of work: the counters tick at 100 Hz or so
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            sum(i * i for i in range(1000))
    if load["others_frac"] is None:
        pytest.skip(load["note"])
    # within a tick or two of the run's CPU capacity
    assert 0 <= load["others_frac"] <= 1.05 and 0 <= load["steal_frac"] <= 1.05 and load["wall_s"] >= 0.5
    assert 0.1 / load["cpus"] < load["own_frac"] <= 1.05  # the loop kept one CPU busy
