"""The Gradescope zip within Gradescope's default limits: 768 MiB of memory and half a CPU.

A cgroup (v1: /sys/fs/cgroup/memory and /sys/fs/cgroup/cpu) with exactly those limits holds the
whole run_autograder, children included. The solutions and the most memory- and time-hungry
catalogued mistakes must score, stage by stage, what they score without limits, and the kernel must
not have killed anything in the cgroup. `pytest -s` prints the measured times and peaks.
"""
import json
import os
import sys
import time
from pathlib import Path

import pytest
from conftest import MUTANTS, SOLUTIONS, variant

from autograder.instructor.build import autograder_zip, gradescope_local

pytestmark = pytest.mark.slow  # builds or runs a whole channel: `make test` only (CONTRIBUTING.md)

MEMORY_BYTES = 768 * 2**20
CPU_QUOTA_US, CPU_PERIOD_US = 50_000, 100_000  # 0.5 CPU
CGROUP_V1 = Path("/sys/fs/cgroup")
HUNGRY = ["fused-materialized-mask", "fused-not-fused", "cache-quadratic-step"]
# not a catalogued id: the tiled loop run as one block, so the n x n score matrix is built after all
TILED_ONE_BLOCK = {"tiled.py": [("    n_q, d_k = q.shape\n    n_k, d_v = v.shape\n",
                                 "    n_q, d_k = q.shape\n    n_k, d_v = v.shape\n    block_q, block_k = n_q, n_k\n")]}


class Cgroup:
    """A memory and a cpu cgroup (v1) with Gradescope's limits; `join` moves the calling process in."""

    def __init__(self, name: str) -> None:
        self.memory, self.cpu = CGROUP_V1 / "memory" / name, CGROUP_V1 / "cpu" / name
        for d in (self.memory, self.cpu):
            d.mkdir()
        (self.memory / "memory.limit_in_bytes").write_text(str(MEMORY_BYTES))
        if (self.memory / "memory.memsw.limit_in_bytes").exists():  # no swap to spill into
            (self.memory / "memory.memsw.limit_in_bytes").write_text(str(MEMORY_BYTES))
        (self.cpu / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
        (self.cpu / "cpu.cfs_quota_us").write_text(str(CPU_QUOTA_US))

    def join(self) -> None:
        for d in (self.memory, self.cpu):
            (d / "cgroup.procs").write_text(str(os.getpid()))

    def peak_bytes(self) -> int:
        return int((self.memory / "memory.max_usage_in_bytes").read_text())

    def oom_kills(self) -> int:
        fields = dict(line.split() for line in (self.memory / "memory.oom_control").read_text().splitlines())
        return int(fields.get("oom_kill", 0))

    def remove(self) -> None:
        for d in (self.memory, self.cpu):
            for _ in range(50):  # the last processes may still be leaving
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


def make_cgroup(name: str) -> Cgroup:
    """The cgroup, or a skip that says why it cannot be made here."""
    if os.geteuid() != 0:
        pytest.skip("making a cgroup needs root")
    if not (CGROUP_V1 / "memory" / "memory.limit_in_bytes").exists() or not (CGROUP_V1 / "cpu" / "cpu.cfs_quota_us").exists():
        pytest.skip("no cgroup v1 memory and cpu hierarchies at /sys/fs/cgroup")
    try:
        return Cgroup(name)
    except OSError as e:
        pytest.skip(f"cannot make a cgroup here: {e}")


@pytest.fixture(scope="module")
def zip_path(tmp_path_factory):
    return autograder_zip(tmp_path_factory.mktemp("zip") / "autograder.zip", "limits-secret")


def run(zip_path: Path, submission: Path, root: Path, cgroup: Cgroup | None = None) -> tuple[dict, float]:
    t0 = time.monotonic()
    out = gradescope_local(submission, zip_path, root, python=sys.executable, preexec=cgroup and cgroup.join)
    seconds = time.monotonic() - t0
    data = json.loads(out.read_text())
    return {n: s["score"] for n, s in data["extra_data"]["stages"].items()}, seconds


SUBMISSIONS = ["solutions", *HUNGRY, "tiled-one-block"]


def edits_of(name: str) -> dict:
    return TILED_ONE_BLOCK if name == "tiled-one-block" else MUTANTS[name][0]


@pytest.mark.serial  # half a CPU: beside other tests its grade would run past its own time budget
@pytest.mark.parametrize("name", SUBMISSIONS)
def test_scores_within_gradescope_limits_equal_unlimited(zip_path, tmp_path, name):
    sub = SOLUTIONS if name == "solutions" else variant(tmp_path / "sub", edits_of(name))
    cgroup = make_cgroup(f"attn-limits-{os.getpid()}-{name}")
    try:
        free, free_s = run(zip_path, sub, tmp_path / "free")
        limited, limited_s = run(zip_path, sub, tmp_path / "limited", cgroup)
        peak, kills = cgroup.peak_bytes(), cgroup.oom_kills()
    finally:
        cgroup.remove()
    print(f"\n{name}: unlimited {sum(free.values()):g} pts in {free_s:.1f} s; 768 MiB / 0.5 CPU "
          f"{sum(limited.values()):g} pts in {limited_s:.1f} s, peak {peak / 2**20:.0f} MiB, {kills} OOM kills")
    assert kills == 0, f"{name}: the kernel killed a process of the run (peak {peak / 2**20:.0f} MiB)"
    assert limited == free, name
