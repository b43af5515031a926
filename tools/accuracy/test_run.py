#!/usr/bin/env python3
"""Tests of tools/accuracy/run (standard library only): `python3 tools/accuracy/test_run.py`.

Not part of `cargo test`. The end-to-end case needs the measured runs
(PDSIM_SHARED) and a release build; without them it says it was skipped."""

import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "run")
REPO = os.path.dirname(os.path.dirname(HERE))


def load_tool():
    loader = importlib.machinery.SourceFileLoader("accuracy_run", TOOL)
    spec = importlib.util.spec_from_loader("accuracy_run", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


tool = load_tool()


def run_tool(*args, env=None):
    e = dict(os.environ)
    e.pop("PDSIM_SHARED", None)
    e.update(env or {})
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, env=e)


class Usage(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def test_missing_runs_folder_exits_2_and_names_it(self):
        missing = os.path.join(self.tmp, "no-such-runs")
        p = run_tool("--pdsim", sys.executable, "--runs", missing,
                     "--out", os.path.join(self.tmp, "A.md"))
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(missing, p.stderr)
        self.assertIn("not there", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "A.md")))

    def test_missing_pdsim_exits_2(self):
        p = run_tool("--pdsim", os.path.join(self.tmp, "pdsim"), "--runs", self.tmp)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("cargo build --release", p.stderr)

    def test_foreign_output_file_is_not_replaced(self):
        out = os.path.join(self.tmp, "ACCURACY.md")
        with open(out, "w") as f:
            f.write("a user's own notes\n")
        p = run_tool("--pdsim", sys.executable, "--runs", self.tmp, "--out", out)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("not written by this tool", p.stderr)
        with open(out) as f:
            self.assertEqual(f.read(), "a user's own notes\n")


class FailedReplay(unittest.TestCase):
    def test_a_failed_replay_is_named_in_the_table_and_exits_1(self):
        tmp = tempfile.mkdtemp()
        try:
            pdsim = os.path.join(tmp, "pdsim")
            with open(pdsim, "w") as f:
                f.write("#!/bin/sh\necho 'error: the engine broke' >&2\nexit 3\n")
            os.chmod(pdsim, 0o755)
            run = os.path.join(tmp, "runs", "20990101-000000-llama-2-7b-tp1-codegen")
            os.makedirs(os.path.join(run, "results"))
            with open(os.path.join(run, "exp-config.yaml"), "w") as f:
                f.write("model: meta-llama/Llama-2-7b-hf\ntensor_parallelism: 1\n")
            with open(os.path.join(run, "results", "config.yaml"), "w") as f:
                f.write("data:\n  shared_prefix:\n    output_len: 10\n")
            out = os.path.join(tmp, "A.md")
            p = run_tool("--pdsim", pdsim, "--runs", os.path.join(tmp, "runs"), "--out", out)
            self.assertEqual(p.returncode, 1, p.stderr)
            with open(out) as f:
                text = f.read()
            self.assertIn("**Incomplete: these runs failed to replay", text)
            self.assertIn("pdsim exited 3: error: the engine broke", text)
            self.assertIn("| TTFT mean | n/a | n/a |", text)
        finally:
            shutil.rmtree(tmp)


class Figures(unittest.TestCase):
    def test_per_token_tpot_divides_by_configured_output_len(self):
        d = {
            "load_summary": {"count": 10},
            "successes": {
                "count": 9,
                "latency": {
                    "time_to_first_token": {"mean": 0.05, "p90": 0.08},
                    "request_latency": {"mean": 2.05, "p90": 2.5},
                    "time_per_output_token": {"mean": 0.004},
                    "inter_token_latency": {"mean": 0.004},
                },
                "throughput": {"requests_per_sec": 1.5},
                "output_len": {"mean": 150.0},
            },
            "failures": {"count": 1},
        }
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(d, f)
        try:
            m = tool.measured_figures(f.name, 201)
        finally:
            os.unlink(f.name)
        # (2050 ms - 50 ms) / 200 tokens after the first = 10 ms, not the
        # 13.4 ms the re-tokenised mean of 150 would give.
        self.assertAlmostEqual(m["tpot_mean"], 10.0)
        self.assertAlmostEqual(m["ttft_p90"], 80.0)
        self.assertEqual((m["sent"], m["completed"], m["failed"]), (10, 9, 1))

    def test_signed_error_and_mae(self):
        self.assertAlmostEqual(tool.signed_error(90.0, 100.0), -10.0)
        self.assertIsNone(tool.signed_error(1.0, 0.0))
        self.assertEqual(tool.mae([-10.0, 20.0, None]), (15.0, 2))


class LeaveOneOut(unittest.TestCase):
    def test_scenario_copy_names_the_set_last(self):
        tmp = tempfile.mkdtemp()
        try:
            path = os.path.join(tmp, "s.yaml")
            pair = tool.PAIRS[("meta-llama/Llama-2-7b-hf", 1)]
            tool.scenario_naming(pair, "calibrated-x", path)
            with open(path) as f:
                text = f.read()
            self.assertIn("coefficients:\n  - cost-model-host-overheads\n  - calibrated-x\n", text)
        finally:
            shutil.rmtree(tmp)


class EndToEnd(unittest.TestCase):
    def test_one_real_run(self):
        shared = os.environ.get("PDSIM_SHARED")
        pdsim = os.path.join(REPO, "target", "release", "pdsim")
        runs = os.path.join(shared or "", tool.RUNS_UNDER_SHARED)
        if not shared or not os.path.isdir(runs) or not os.path.isfile(pdsim):
            print("skipped: needs PDSIM_SHARED and target/release/pdsim", file=sys.stderr)
            return
        name = sorted(os.listdir(runs))[0]
        tmp = tempfile.mkdtemp()
        try:
            one = os.path.join(tmp, "runs")
            os.mkdir(one)
            os.symlink(os.path.join(runs, name), os.path.join(one, name))
            out = os.path.join(tmp, "A.md")
            p = run_tool("--pdsim", pdsim, "--runs", one, "--out", out)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(out) as f:
                text = f.read()
            self.assertTrue(text.startswith(tool.MARKER))
            self.assertIn(f"### `{name}`", text)
            self.assertIn("| TTFT mean | ", text)
            # One run is alone in its scope: no leave-one-out fit is possible.
            self.assertIn("no other run in scope", text)
            self.assertIn("| TTFT mean | ", text)
            # Regenerating over its own output is allowed.
            p = run_tool("--pdsim", pdsim, "--runs", one, "--out", out)
            self.assertEqual(p.returncode, 0, p.stderr)
        finally:
            shutil.rmtree(tmp)


if __name__ == "__main__":
    unittest.main()
