"""Batch regrade: every submission gets a row and a JSON file; a broken one never stops the batch."""
import csv
import json
import shutil

from conftest import EXERCISES, SOLUTIONS, variant

from autograder.regrade import regrade


def test_regrade_folder(tmp_path):
    batch = tmp_path / "batch"
    batch.mkdir()
    shutil.copytree(SOLUTIONS, batch / "alice")
    shutil.copytree(EXERCISES, batch / "bob")
    shutil.copytree(variant(tmp_path / "v", {"masking.py": [("return j <= i + (n_k - n_q)", "return j <= i")]}),
                    batch / "carol")
    (batch / "dave.zip").write_text("not a zip at all")
    out = regrade(batch, jobs=2, quiet=True)
    rows = {r["submission"]: r for r in csv.DictReader(open(out / "summary.csv"))}
    assert set(rows) == {"alice", "bob", "carol", "dave.zip"}
    assert float(rows["alice"]["total"]) == 100 and float(rows["bob"]["total"]) == 0
    assert float(rows["carol"]["masking"]) < 16 and float(rows["carol"]["softmax"]) == 12
    assert rows["dave.zip"]["error"]
    carol = json.loads((out / "carol.json").read_text())
    assert any(t["extra_data"]["diagnosis"] == "mask-top-left" for t in carol["tests"])


def test_zygote_children_are_sandboxed_like_spawned_ones(tmp_path):
    """Forked from the fork server, a torch child still crashes alone, times out alone, and is swept."""
    from conftest import grade

    from autograder.sandbox import Zygote

    z = Zygote()
    try:
        sub = variant(tmp_path, {"kv_cache.py": [("        t = k_new.shape[-2]\n", "        import os; os._exit(7)\n")]})
        res = grade(sub, stages=["kv_cache", "fused"], zygote=z)
        assert any("exit code 7" in r.message for r in res.stages["kv_cache"].checks)
        assert res.stages["fused"].status == "passed"
        full = grade(SOLUTIONS, zygote=z)
        assert full.score == 100 and full.bonus_score == 30
    finally:
        z.close()
