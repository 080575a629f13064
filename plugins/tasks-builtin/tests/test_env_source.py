"""prl.envs.EnvSource with the builtin tasksets: selection, guarded rollouts, env servers."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
from prl_tasks_builtin import ReverseText

from prl.config.components import SourceConfig
from prl.envs import EnvServerDied, EnvSource
from prl.tasks.testing import ByteRenderer, ScriptedClient, last_user
from prl.types import Generation, Sampling


def source(**kw) -> SourceConfig:
    env = {"taskset": {"id": "reverse-text", "num_train": 20, "num_eval": 5}, **kw.pop("env", {})}
    return SourceConfig.model_validate({"name": "rt", "env": env, **kw})


def run(coro):
    return asyncio.run(coro)


def test_tasks_follow_select_skip_shuffle_limit():
    all_ids = [t.task_id for t in EnvSource(source(), "train", None).tasks()]
    assert len(all_ids) == 20
    picked = [t.task_id for t in EnvSource(source(select={"skip": 5, "limit": 4}), "train", None).tasks()]
    assert picked == all_ids[5:9]
    shuffled = [t.task_id for t in EnvSource(source(select={"shuffle": True, "limit": 10}), "train", None).tasks()]
    again = [t.task_id for t in EnvSource(source(select={"shuffle": True, "limit": 10}), "train", None).tasks()]
    assert shuffled == again and shuffled != all_ids[:10] and set(shuffled) <= set(all_ids)
    assert len(EnvSource(source(), "eval", None).tasks()) == 5


def test_taskset_split_overrides_the_role():
    # the reference's `split = "test"` on an eval source's taskset: the held-out split
    eval_ids = [t.task_id for t in EnvSource(source(), "eval", None).tasks()]
    test_src = source(env={"taskset": {"id": "reverse-text", "num_train": 20, "num_eval": 5, "split": "test"}})
    assert [t.task_id for t in EnvSource(test_src, "eval", None).tasks()] == eval_ids
    # a train source pointed at the eval split reads it, not the train data
    train_on_eval = source(env={"taskset": {"id": "reverse-text", "num_train": 20, "num_eval": 5, "split": "eval"}})
    assert [t.task_id for t in EnvSource(train_on_eval, "train", None).tasks()] == eval_ids
    with pytest.raises(ValueError, match="split 'dev' is not one of this taskset's splits"):
        source(env={"taskset": {"id": "reverse-text", "split": "dev"}})


def test_rollout_is_stamped_with_source_and_version():
    env = EnvSource(source(), "train", None)
    run(env.start())
    task = env.tasks()[0]
    trace = run(
        env.rollout(task, ScriptedClient(lambda m: last_user(m)[::-1]), ByteRenderer(), Sampling(), policy_version=7)
    )
    assert trace.ok and trace.reward == 1.0
    assert trace.env == "rt" and trace.policy_version == 7 and trace.task_id == task.task_id and trace.trace_id
    env.check_alive()  # in-process: nothing to die
    run(env.close())


class Exploding:
    async def generate(self, prompt_ids, sampling):
        raise RuntimeError("inference exploded")


class Slow:
    async def generate(self, prompt_ids, sampling):
        await asyncio.sleep(30)
        return Generation([1], [0.0], "stop")


def test_failures_and_timeouts_are_recorded_not_raised():
    env = EnvSource(source(env={"timeout": 0.3}), "train", None)
    task = env.tasks()[0]
    failed = run(env.rollout(task, Exploding(), ByteRenderer(), Sampling(), 2))
    assert failed.error == "RuntimeError: inference exploded" and not failed.ok and failed.branches == []
    assert failed.env == "rt" and failed.policy_version == 2
    start = time.monotonic()
    slow = run(env.rollout(task, Slow(), ByteRenderer(), Sampling(), 2))
    assert slow.is_timeout and not slow.ok and time.monotonic() - start < 5


def test_spawned_env_server_writes_address_and_log_and_stops(tmp_path, monkeypatch):
    # A taskset that asks for its own process is spawned with `prl env-server`.
    monkeypatch.setattr(ReverseText, "in_process", False)
    monkeypatch.delenv("PRL_ATTEMPT_LOG_DIR", raising=False)  # the log goes under this run
    attempt = tmp_path / "run" / "configs" / "attempt_1"
    env = EnvSource(source(), "eval", tmp_path / "run", attempt_config_dir=attempt)

    async def scenario():
        await env.start()
        address_file = attempt / "resolved" / "envs" / "eval" / "rt.address"
        assert address_file.read_text().strip() == env.address
        env.check_alive()
        env._process.send_signal(signal.SIGKILL)
        env._process.wait()
        with pytest.raises(EnvServerDied, match="source 'rt'.*exited") as info:
            env.check_alive()
        assert info.value.source == "rt"
        # a rollout against the dead server is still a recorded failure, not an exception
        trace = await env.rollout(env.tasks()[0], ScriptedClient(lambda m: ""), ByteRenderer(), Sampling(), 0)
        assert trace.error and not trace.ok and trace.env == "rt"
        await env.close()

    run(scenario())
    assert (attempt / "resolved" / "envs" / "eval" / "rt.json").exists()
    assert (tmp_path / "run" / "logs" / "attempt_1" / "envs" / "eval" / "rt.log").exists()
