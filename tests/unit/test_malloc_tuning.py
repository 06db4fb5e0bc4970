"""autorecovery.malloc: glibc thresholds for processes that churn entry buffers (issue 13)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from autorecovery.malloc import TRIM_THRESHOLD_BYTES, tune_malloc

# 32 x 1 MiB buffers in flight, then all freed, 20 times (a bookie's window of messages, in miniature);
# counts the minor page faults of the rounds after the first
CHURN = """
import json, resource, sys
from autorecovery.malloc import tune_malloc
tuned = tune_malloc() if sys.argv[1] == "tune" else None
def rounds(n):
    for _ in range(n):
        bufs = [b"x" * (1 << 20) for _ in range(32)]
        del bufs
rounds(1)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
rounds(20)
print(json.dumps({"tuned": tuned, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def churn(mode: str, extra_env: dict[str, str] | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(extra_env or {})
    out = subprocess.run([sys.executable, "-c", CHURN, mode], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_tuned_process_reuses_freed_buffers_instead_of_faulting_them_in_again():
    plain, tuned = churn("plain"), churn("tune")
    assert tuned["tuned"] == {"mmap_threshold_bytes": 4 << 20, "trim_threshold_bytes": TRIM_THRESHOLD_BYTES}
    # untuned glibc gives the freed 32 MiB back and faults it in again every round (~8k pages a round)
    assert plain["faults"] > 20 * 4000, plain
    assert tuned["faults"] < plain["faults"] / 10, (plain, tuned)


def test_operator_malloc_variables_are_left_alone():
    assert tune_malloc({"MALLOC_TRIM_THRESHOLD_": "1048576"}) is None
    assert tune_malloc({"MALLOC_MMAP_THRESHOLD_": "65536"}) is None
    assert churn("tune", {"MALLOC_TOP_PAD_": "0"})["tuned"] is None
