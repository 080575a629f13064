"""``prl sft`` with ``[inference]`` and ``[eval]`` end to end through the local launcher: the
real torch inference backend, the real online-eval process and the real torch trainer on
a tiny model, four SFT steps on reverse-text with an eval every two."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from prl.evalplan import eval_versions
from prl.online_eval import scores_start
from prl.serving import free_port

pytest.importorskip("prl_model_init")
pytest.importorskip("prl_inference_torch")
pytest.importorskip("prl_weights_filesystem")
pytest.importorskip("prl_launcher_local")
pytest.importorskip("prl_tasks_builtin")
pytest.importorskip("prl_trainer_torch")

EVAL = """
[eval]
interval = 2
num_examples = 3
[eval.sampling]
temperature = 0.0
max_completion_tokens = 8
[[eval.source]]
name = "reverse-text"
env.taskset.id = "reverse-text"
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, reverse_text_sft):
    """A tiny model and SFT rows made from the reverse-text taskset's train split."""
    from prl_model_init.build import make_model

    base = tmp_path_factory.mktemp("sft-eval")
    return make_model(base / "model", preset="tiny"), reverse_text_sft(base / "train.jsonl", 200)


def _toml(tmp_path, model, data, extra: str = EVAL) -> str:
    toml = tmp_path / "sft.toml"
    body = f'''
        max_steps = 4
        output_dir = "{tmp_path / "outputs"}"
        env_vars = {{ OMP_NUM_THREADS = "1" }}
        [model]
        name = "{model}"
        [data]
        name = "{data}"
        seq_len = 128
        batch_size = 8
        [optim]
        lr = 5e-3
        [inference.server]
        port = {free_port("127.0.0.1")}
    '''
    toml.write_text(textwrap.dedent(body) + extra)
    return str(toml)


def _prl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prl", *args], capture_output=True, text=True, timeout=120)


def test_the_plan_broadcasts_the_start_every_interval_and_the_final_step():
    assert eval_versions(0, 5, 2) == [0, 2, 4, 5]
    assert eval_versions(4, 9, 3) == [4, 6, 9]
    assert eval_versions(0, 4, 10) == [0, 4]


def test_the_start_up_version_is_evaluated_unless_skipped_or_resumed():
    from prl.config.sft_eval import SFTEvalConfig

    source = {"name": "r", "env": {"taskset": {"id": "reverse-text"}}}

    def cfg(**kw):
        return SFTEvalConfig.model_validate({"source": [source], **kw})

    assert scores_start(cfg(), 0) and not scores_start(cfg(skip_first_step=True), 0)
    assert not scores_start(cfg(), 3) and scores_start(cfg(retrigger_on_resume=True), 3)


def test_inference_without_eval_is_a_one_line_usage_error(tmp_path, tiny):
    out = _prl("sft", "@", _toml(tmp_path, *tiny, extra=""), "--dry-run")
    assert out.returncode == 2
    assert "inference: [inference] without [eval] is an error" in out.stderr
    assert "Traceback" not in out.stderr


def test_eval_without_sources_is_a_usage_error_naming_the_field(tmp_path, tiny):
    out = _prl("sft", "@", _toml(tmp_path, *tiny, extra="[eval]\ninterval = 2\n"), "--dry-run")
    assert out.returncode == 2
    assert "--eval: Value error, [eval] needs at least one [[eval.source]] block" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("port", [None, "0"])
def test_a_dry_run_writes_one_resolved_config_per_child(tmp_path, tiny, port):
    # Port 0 ("any free port") is pinned at launch so the eval client knows it.
    extra = ["--inference.server.port", port] if port else []
    out = _prl("sft", "@", _toml(tmp_path, *tiny), "--run.name", "dry", "--dry-run", *extra)
    assert out.returncode == 0, out.stderr
    resolved = tmp_path / "outputs" / "dry" / "configs" / "attempt_1" / "resolved"
    sft = json.loads((resolved / "sft.json").read_text())
    inference = json.loads((resolved / "inference.json").read_text())
    assert inference["model"]["name"] == sft["model"]["name"]  # serves the trained model
    port = inference["server"]["port"]
    assert port > 0 and sft["eval"]["client"]["base_url"] == f"http://127.0.0.1:{port}"
    assert (resolved / "envs" / "eval" / "reverse-text.json").exists()


def _eval_traces(run_dir) -> dict[int, list[dict]]:
    """Eval rollouts by the step they were logged at (the file monitor's trace stream)."""
    traces = run_dir / "monitors" / "file" / "traces"
    index = [json.loads(x) for x in (traces / "stream.index.jsonl").read_text().splitlines()]
    out: dict[int, list[dict]] = {}
    for row in index:
        with open(traces / "stream" / f"{row['chunk']:05d}.jsonl", "rb") as fh:
            fh.seek(row["offset"])
            out.setdefault(row["step"], []).append(json.loads(fh.readline()))
    return out


def _first_token_logprobs(model_dir, weights, traces) -> list[tuple[float, float]]:
    """(inference's, recomputed) logprob of each rollout's first sampled token; the recomputed
    one runs ``weights`` (or the base model) in transformers. Greedy: log softmax of logits."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    if weights is not None:
        from safetensors.torch import load_file

        model.load_state_dict(load_file(str(weights / "model.safetensors")))
    pairs = []
    for trace in traces:
        branch = trace["branches"][0]
        first = branch["sampled_mask"].index(True)
        with torch.no_grad():
            logits = model(torch.tensor([branch["token_ids"][:first]])).logits[0, -1]
        mine = torch.log_softmax(logits.float(), -1)[branch["token_ids"][first]].item()
        pairs.append((branch["logprobs"][first], mine))
    return pairs


@pytest.mark.slow
def test_prl_sft_evaluates_the_base_model_and_the_trained_weights(tmp_path, tiny, capsys):
    from prl.cli.commands import cmd_sft

    code = cmd_sft(["@", _toml(tmp_path, *tiny), "--run.name", "e2e"])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    run_dir = tmp_path / "outputs" / "e2e"
    logs = run_dir / "logs" / "attempt_1"
    assert (logs / "eval.log").exists() and (logs / "inference.log").exists() and (logs / "trainer.log").exists()
    rows = [json.loads(x) for x in (run_dir / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()]
    evals = {r["step"]: r for r in rows if r.get("producer") == "online-eval"}
    # The base model first, every interval, and the final step (4 is both).
    assert sorted(evals) == [0, 2, 4]
    assert all("eval/reverse-text/avg@1" in r and "eval/reverse-text/pass@1" in r for r in evals.values())
    trainer = {r["step"]: r for r in rows if r.get("producer") == "trainer" and "loss/mean" in r}
    assert sorted(trainer) == [1, 2, 3, 4]
    assert [s for s, r in sorted(trainer.items()) if "time/broadcast_weights" in r] == [2, 4]

    traces = _eval_traces(run_dir)
    assert sorted(traces) == [0, 2, 4] and all(len(t) == 3 for t in traces.values())
    assert all(t["policy_version"] == step for step, ts in traces.items() for t in ts)
    # What inference sampled at step 0 is the base model's, at step 4 the step-4 weights'.
    model = tiny[0]
    for step, weights in ((0, None), (4, run_dir / "broadcasts" / "step_4")):
        for served, recomputed in _first_token_logprobs(model, weights, traces[step]):
            assert served == pytest.approx(recomputed, abs=2e-3), step
    # ... and they differ: training changed what was evaluated.
    before = [t["branches"][0]["logprobs"][t["branches"][0]["sampled_mask"].index(True)] for t in traces[0]]
    after = [t["branches"][0]["logprobs"][t["branches"][0]["sampled_mask"].index(True)] for t in traces[4]]
    assert max(abs(a - b) for a, b in zip(before, after, strict=True)) > 0.1


@pytest.mark.slow
def test_a_resumed_run_reloads_its_checkpoint_weights_and_can_evaluate_them_again(tmp_path, tiny, capsys):
    """Steps 1-2, stop; ``--resume`` to step 4 broadcasts step 2 again, inference (fresh,
    serving the base model) loads it, and retrigger_on_resume evaluates it."""
    from prl.cli.commands import cmd_sft

    toml = _toml(tmp_path, *tiny, extra=EVAL + "[ckpt]\n")
    assert cmd_sft(["@", toml, "--run.name", "again", "--max-steps", "2"]) == 0
    code = cmd_sft(["@", toml, "--run.name", "again", "--resume", "--eval.retrigger-on-resume"])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    run_dir = tmp_path / "outputs" / "again"
    rows = [json.loads(x) for x in (run_dir / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()]
    evals = [(r["step"], r.get("attempt", 1)) for r in rows if r.get("producer") == "online-eval"]
    assert evals == [(0, 1), (2, 1), (2, 2), (4, 2)]
    assert "inference now serves policy version 2" in (run_dir / "logs" / "attempt_2" / "eval.log").read_text()
    served = [t["branches"][0] for t in _eval_traces(run_dir)[2]]
    assert len(served) == 6  # step 2 scored twice (3 examples each), by the same weights both times
    first = [b["logprobs"][b["sampled_mask"].index(True)] for b in served]
    assert first[:3] == pytest.approx(first[3:], abs=2e-3)
