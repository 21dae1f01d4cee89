"""The standing adversary in the test command (adversary.py says what it sends and what fails
a run): for each seed of ADVERSARY_SEEDS (default 1,2,3), a fresh hosted server under the
memory limit takes ADVERSARY_CASES (default 150) cases from two attacker threads while the
watchdog tenant is answered within 5 s each; a run also stops after ADVERSARY_SECONDS (default
60) of sending, so the three take about three minutes at most on two cores. Set
ADVERSARY_SECONDS (with a large ADVERSARY_CASES) to run longer on demand:

    ADVERSARY_SEEDS=7 ADVERSARY_CASES=1000000 ADVERSARY_SECONDS=3600 \\
        .venv/bin/python -m pytest tests/http/test_adversary.py

A failing run prints the seed, the cases before the failure (each replayable with
`adversary.py --replay`) and the shortest replay found within ADVERSARY_SHRINK_SECONDS
(default 60; 0 turns shrinking off).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from adversary import CLIENT_GRACE, STATEMENT_TIMEOUT, run, shrink, start_arena
from fake_llm import FakeLLM

SEEDS = [int(seed) for seed in os.environ.get("ADVERSARY_SEEDS", "1,2,3").split(",")]
CASES = int(os.environ.get("ADVERSARY_CASES", "150"))
SECONDS = float(os.environ.get("ADVERSARY_SECONDS", "60"))
SHRINK_SECONDS = float(os.environ.get("ADVERSARY_SHRINK_SECONDS", "60"))
# The run, the cases still in flight when it ends, the checks, shrinking and the teardown.
TIMEOUT = SECONDS + STATEMENT_TIMEOUT + CLIENT_GRACE + SHRINK_SECONDS + 120


@pytest.fixture
def llm():
    with FakeLLM() as fake:
        yield fake


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("seed", SEEDS)
def test_the_adversary_neither_kills_nor_stalls_the_server_nor_gets_a_5xx(
        start_limited_server, llm, server_bin: Path, tmp_path: Path, seed: int):
    arena = start_arena(start_limited_server, llm)
    report = run(arena, seed, cases=CASES, seconds=SECONDS, workers=2)
    text = report.text(str(server_bin))
    print(text)
    if report.failed:
        if SHRINK_SECONDS > 0:
            text += "\nshrinking: " + shrink(server_bin, tmp_path / "shrink", report,
                                             SHRINK_SECONDS)
        pytest.fail(text, pytrace=False)
    arena.server.assert_alive()
