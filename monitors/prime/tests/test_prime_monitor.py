"""The prime monitor over the real prime-runs SDK in its disabled mode (no network here):
the platform runs it opens, what it hands them, ``run.json``, and its usage errors."""

import dataclasses
import json

import prime_runs
import pytest
from prl_monitor_prime import PrimeMonitor
from prl_monitor_prime.runfile import read, resolved_meta

from prl.config.errors import ConfigError
from prl.config.monitors import MonitorsSection
from prl.config.propagate import propagate_shared
from prl.config.roots import RLConfig
from prl.plugins import get_registry
from prl.types import Branch, Trace


@pytest.fixture
def disabled(monkeypatch, tmp_path):
    monkeypatch.setenv("PRIME_RUNS_MODE", "disabled")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.prime/config.json login
    monkeypatch.delenv("PRIME_API_KEY", raising=False)


@pytest.fixture
def sent(monkeypatch):
    """What the monitor hands each prime_runs.Run (the real methods still run)."""
    calls = []
    for name in ("log_metrics", "log_traces", "update_summary"):
        real = getattr(prime_runs.Run, name)

        def spy(self, *args, _real=real, _name=name, **kwargs):
            calls.append((self.id, _name, args, kwargs))
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(prime_runs.Run, name, spy)
    return calls


def _trace(env="reverse-text", reward=0.5):
    branch = Branch([1, 2, 3], [False, True, True], [0.0, -1.0, -2.0])
    messages = [{"role": "user", "content": "abc"}, {"role": "assistant", "content": "cba"}]
    trace = Trace("t0", "task-1", env, [branch], reward=reward, messages=messages)
    return {**dataclasses.asdict(trace), "kind": "eval"}


def test_registered_off_by_default_and_orchestrator_only_under_rl():
    assert get_registry().get("monitors", "prime") is PrimeMonitor
    assert MonitorsSection(component=True).model()().prime is None
    data = propagate_shared({"monitors": {"prime": {"name": "p"}, "wandb": {"project": "w"}}}, RLConfig)
    assert data["orchestrator"]["monitors"]["prime"] == {"name": "p"}
    assert "prime" not in data["trainer"]["monitors"]
    assert data["trainer"]["monitors"]["wandb"] == {"project": "w"}  # other monitors: both sides


def test_a_training_run_gets_stepped_metrics_and_episodes_and_lands_in_run_json(tmp_path, disabled, sent):
    monitor = PrimeMonitor(PrimeMonitor.Config(tags=["ci"]), tmp_path, "orch", "reverse-text--tiny--1a2b")
    run = monitor.runs[None]
    assert (run.kind, run.mode, run.name) == ("train", "disabled", "reverse-text--tiny--1a2b")
    monitor.log({"reward/all/mean": 0.5, "loss/all": float("nan")}, step=1)
    monitor.log({"event_loop_lag/max": 0.01}, step=None)  # a time-keyed row stays local
    monitor.log_traces([_trace()], step=1)
    entries = read(tmp_path / "monitors" / "prime")
    assert [(e["status"], e["kind"], e["producer"]) for e in entries] == [("running", "train", "orch")]
    monitor.close()

    assert [c[1] for c in sent] == ["log_metrics", "log_traces"]
    assert sent[0][2] == ({"reward/all/mean": 0.5},) and sent[0][3] == {"step": 1}  # NaN dropped
    (episode,) = sent[1][2][0]
    assert (episode["id"], episode["env"], episode["reward"], episode["tokens"], episode["step"]) == (
        "t0", "reverse-text", 0.5, 3, 1
    )  # fmt: skip
    assert episode["messages"][-1]["content"] == "cba"
    (entry,) = read(tmp_path / "monitors" / "prime")
    assert entry["id"] == run.id and entry["id"].startswith("disabled-")
    assert (entry["name"], entry["mode"], entry["status"], entry["url"]) == (
        "reverse-text--tiny--1a2b", "disabled", "completed", None
    )  # fmt: skip


def test_an_eval_opens_one_platform_evaluation_per_source(tmp_path, disabled, sent):
    monitor = PrimeMonitor(PrimeMonitor.Config(name="nightly"), tmp_path, "eval", "ignored")
    assert monitor.runs == {}  # evaluations open when their source shows up
    monitor.log_plan({"reverse-text": 4}, step=0)
    monitor.log_traces([_trace("reverse-text"), _trace("alphabet-sort", 1.0)], step=0)
    monitor.log({"eval/reverse-text/avg@1": 0.25, "eval/alphabet-sort/pass@1": 1.0}, step=0)
    runs = dict(monitor.runs)
    assert set(runs) == {"reverse-text", "alphabet-sort"}
    assert runs["reverse-text"].summary == {"planned_rollouts": 4, "avg@1": 0.25, "step": 0}
    assert runs["alphabet-sort"].summary == {"pass@1": 1.0, "step": 0}
    monitor.close()
    entries = {e["source"]: e for e in read(tmp_path / "monitors" / "prime")}
    assert set(entries) == {"reverse-text", "alphabet-sort"}
    assert entries["reverse-text"]["name"] == "nightly/reverse-text"
    assert all(e["kind"] == "eval" and e["status"] == "completed" for e in entries.values())
    traces = [c for c in sent if c[1] == "log_traces"]
    assert sorted((c[0], c[2][0][0]["env"]) for c in traces) == sorted(
        (runs[s].id, s) for s in ("reverse-text", "alphabet-sort")
    )


def test_trainer_and_online_eval_of_one_sft_run_share_run_json(tmp_path, disabled):
    trainer = PrimeMonitor(PrimeMonitor.Config(), tmp_path, "trainer", "sft-run")
    online = PrimeMonitor(PrimeMonitor.Config(), tmp_path, "online-eval", "sft-run")
    online.log({"eval/reverse-text/avg@1": 0.5}, step=2)
    online.close()
    trainer.close()
    entries = read(tmp_path / "monitors" / "prime")
    assert sorted((e["producer"], e["kind"], e["status"]) for e in entries) == [
        ("online-eval", "eval", "completed"),
        ("trainer", "train", "completed"),
    ]


def test_the_platform_run_header_comes_from_the_resolved_config(tmp_path):
    resolved = tmp_path / "configs" / "latest" / "resolved"
    resolved.mkdir(parents=True)
    orch = {"model": {"name": "Qwen/Qwen3-0.6B"}, "max_steps": 20, "batch_size": 64, "seq_len": 2048,
            "train": {"group_size": 8, "source": [{"name": "reverse-text"}, {"name": "gsm8k"}]}}  # fmt: skip
    (resolved / "orchestrator.json").write_text(json.dumps(orch))
    meta = resolved_meta(tmp_path, "orch")
    assert meta["model"] == "Qwen/Qwen3-0.6B" and meta["environments"] == ["reverse-text", "gsm8k"]
    assert meta["training"] == {"max_steps": 20, "batch_size": 64, "rollouts_per_example": 8, "seq_len": 2048}
    assert resolved_meta(tmp_path, "eval") == {}


def test_a_bad_mode_and_online_without_a_key_are_one_line_errors(tmp_path, disabled, monkeypatch):
    monkeypatch.setenv("PRIME_RUNS_MODE", "offline")
    with pytest.raises(ConfigError, match=r"^monitors.prime: mode='offline' is not one of 'online' or 'disabled'$"):
        PrimeMonitor(PrimeMonitor.Config(), tmp_path, "orch", "r")
    monkeypatch.delenv("PRIME_RUNS_MODE")
    with pytest.raises(ConfigError, match=r"^monitors.prime: mode=\"online\" needs an API key\. Set PRIME_API_KEY"):
        PrimeMonitor(PrimeMonitor.Config(mode="online"), tmp_path, "orch", "r")
    assert not (tmp_path / "monitors" / "prime" / "run.json").exists()


def test_an_unreachable_platform_is_a_one_line_run_error(tmp_path, disabled, monkeypatch):
    from prl.config.errors import RunError
    from prl.serving import free_port

    # online with a key, against a local port nobody listens on: creating the run fails fast
    monkeypatch.delenv("PRIME_RUNS_MODE")
    monkeypatch.setenv("PRIME_API_KEY", "test-key")
    monkeypatch.setenv("PRIME_BASE_URL", f"http://127.0.0.1:{free_port('127.0.0.1')}")
    monkeypatch.setattr(prime_runs._http, "retry_delay", lambda *_: 0.0)  # the SDK's backoff, skipped
    with pytest.raises(RunError, match=r"^monitors.prime: could not open the platform run: \w+"):
        PrimeMonitor(PrimeMonitor.Config(team_id="team"), tmp_path, "eval", "r").log_plan({"reverse-text": 1}, 0)
