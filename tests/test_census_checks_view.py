"""The census's checks as shown: invariants one line each (red where one does not hold), observations
as findings with their ratio per point, every check under its full name, no "FAIL" for a gap."""

from __future__ import annotations

import re

from labkit.results import BenchResult
from labkit.viz.vllm.census_checks import INVARIANT, OBSERVATION, checks_view, kind_of

LONG_A = "schedule saving with the forward off the host matches the scheduler alone"
LONG_B = "schedule saving with the forward off the host matches the engine's scheduler alone"


def census(checks):
    return BenchResult(name="vllm_step", source="measured-cpu", params={"checks": checks}, rows=[],
                       machine={"slug": "m"})


def visible(html: str) -> str:
    """The text a reader sees before opening any ``<details>``."""
    return re.sub(r"<[^>]+>", "", re.sub(r"<details>.*?</details>", "", html, flags=re.S))


def test_kinds_by_name_and_unknown_checks_are_invariants():
    assert kind_of("phases add up") == INVARIANT and kind_of("a check added later") == INVARIANT
    assert kind_of("schedule saving matches the scheduler alone") == OBSERVATION
    assert kind_of(LONG_A) == OBSERVATION and kind_of(LONG_B) == OBSERVATION


def test_invariants_one_line_each_red_where_they_fail():
    checks = [{"check": "phases add up", "num_requests": 1, "images": 32, "variant": v, "passed": True, "detail": "ok"}
              for v in ("baseline", "merged")]
    checks.append({"check": "trace agrees with the timers", "num_requests": 8, "images": 32, "variant": "merged",
                   "passed": False, "detail": "schedule 0.5"})
    html = checks_view(census(checks))._repr_html_()
    seen = visible(html)
    assert "phases add up: holds at all 2 points and variants" in seen
    assert "trace agrees with the timers: does not hold at 1 of 1" in seen
    assert 'color:#b00020">&#10007; <b>trace agrees with the timers' in html
    assert "8 x 32, merged: schedule 0.5" in html and "8 x 32, merged" not in seen  # the detail behind a click


def test_observations_state_the_ratio_per_point_and_never_fail():
    checks = [{"check": "schedule saving matches the scheduler alone", "num_requests": n, "images": 32,
               "variant": "baseline-merged", "passed": False, "census_us": c, "scheduler_only_us": s, "detail": "d"}
              for n, c, s in ((1, 60.0, 40.0), (8, 450.0, 300.0), (32, 4000.0, 2000.0))]
    checks += [{"check": name, "num_requests": 1, "images": 32, "variant": "baseline-merged", "passed": True,
                "off_host_us": 50.0, "scheduler_only_us": 40.0, "alone_us": 50.0, "detail": "d"}
               for name in (LONG_A, LONG_B)]
    html = checks_view(census(checks))._repr_html_()
    seen = visible(html)
    assert "FAIL" not in seen and "&#10007;" not in html
    # ratios 1.5, 1.5, 2: median 1.5
    assert "schedule saving is 1.5x the stand-in scheduler's alone (median of 3 points, 1.5x to 2x)" in seen.replace("&#x27;", "'")
    assert "within the check's tolerance at 0 of 3" in seen and "evicts the scheduler" in seen.replace("&#x27;", "'")
    # both long names in full, each once as its own heading
    text = seen.replace("&#x27;", "'")
    assert text.count(LONG_A + " (observation)") == 1 and text.count(LONG_B + " (observation)") == 1
    assert "1.25x" in text and "1x" in text  # 50 / 40 and 50 / 50


def test_no_checks_says_so():
    assert "no checks" in checks_view(census([]))._repr_html_() and "no checks" in checks_view(None)._repr_html_()
