"""Local launcher: success, child death, readiness waits and signals, with real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from prl_launcher_local import LocalLauncher

from prl.contracts.launcher import ProcessSpec
from prl.summary import failed_process

PY = sys.executable


def _spec(tmp: Path, name: str, code: str, ready: bool = False) -> ProcessSpec:
    pidfile = tmp / f"{name}.pid"
    head = f"import os, sys, time, pathlib\npathlib.Path({str(pidfile)!r}).write_text(str(os.getpid()))\n"
    body = head + textwrap.dedent(code)
    return ProcessSpec(
        name, [PY, "-u", "-c", body], tmp / "logs" / f"{name}.log",
        env={"PRL_TEST_DIR": str(tmp)}, ready_file=(tmp / f"{name}.ready") if ready else None, service=ready,
    )  # fmt: skip


WRITE_READY = "pathlib.Path(os.environ['PRL_TEST_DIR'], '{name}.ready').write_text('ok')\n"
SERVER = WRITE_READY + "while True: time.sleep(0.1)\n"


def _alive(tmp: Path, name: str) -> bool:
    pid = int((tmp / f"{name}.pid").read_text())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


def _launcher(tmp, **kw):
    return LocalLauncher(LocalLauncher.Config(stop_timeout=5, **kw), tmp)


def test_success_stops_servers_and_echoes_step_lines(tmp_path, capsys):
    specs = [
        _spec(tmp_path, "server", SERVER.format(name="server"), ready=True),
        _spec(tmp_path, "orchestrator", "print('hello'); print('Step 1 | Reward 0.5000 | x'); time.sleep(0.3)\n"),
        _spec(tmp_path, "trainer", "print('Step 1 | loss 0.1'); time.sleep(0.5)\n"),
    ]
    assert _launcher(tmp_path).launch(specs) == 0
    out = capsys.readouterr().out
    assert "[orchestrator] Step 1 | Reward 0.5000 | x" in out and "[trainer] Step 1 | loss 0.1" in out
    assert "hello" not in out  # everything else goes to the log only
    assert "hello" in (tmp_path / "logs" / "orchestrator.log").read_text()
    assert not _alive(tmp_path, "server")


def test_a_dying_child_stops_the_others_and_is_named(tmp_path, capsys):
    specs = [
        _spec(tmp_path, "server", SERVER.format(name="server"), ready=True),
        _spec(tmp_path, "orchestrator", "time.sleep(60)\n"),
        _spec(tmp_path, "trainer", "print('RuntimeError: out of memory'); time.sleep(0.3); sys.exit(3)"),
    ]
    started = time.monotonic()
    assert _launcher(tmp_path).launch(specs) == 3
    assert time.monotonic() - started < 20
    err = capsys.readouterr().err
    assert "process 'trainer' exited with code 3" in err
    assert "RuntimeError: out of memory" in err and "trainer.log" in err
    assert not _alive(tmp_path, "orchestrator") and not _alive(tmp_path, "server")
    # what the end-of-run summary reads to name it
    assert failed_process(tmp_path / "logs") == ("trainer", str(tmp_path / "logs" / "trainer.log"))


def test_a_server_exiting_is_a_failure(tmp_path, capsys):
    specs = [
        _spec(tmp_path, "inference", WRITE_READY.format(name="inference") + "time.sleep(0.5)\n", ready=True),
        _spec(tmp_path, "orchestrator", "time.sleep(60)\n"),
    ]
    assert _launcher(tmp_path).launch(specs) == 1
    assert "process 'inference' exited with code 0" in capsys.readouterr().err


def test_gives_up_waiting_for_a_server_and_says_which(tmp_path, capsys):
    specs = [
        _spec(tmp_path, "inference", "print('still loading'); time.sleep(60)\n", ready=True),
        _spec(tmp_path, "trainer", "pass\n"),
    ]
    assert _launcher(tmp_path, startup_timeout=1.0).launch(specs) == 1
    err = capsys.readouterr().err
    assert "gave up waiting for inference (ready file" in err and "still loading" in err
    assert not (tmp_path / "trainer.pid").exists()  # never started
    assert not _alive(tmp_path, "inference")


def test_waits_for_a_health_url(tmp_path, capsys, monkeypatch):
    import prl_launcher_local.launcher as mod

    monkeypatch.setattr(mod, "SAY_EVERY_S", 0.3)
    spec = _spec(tmp_path, "inference", "time.sleep(60)\n")
    spec.service, spec.health_url = True, "http://127.0.0.1:9"  # nothing listens there
    assert _launcher(tmp_path, startup_timeout=1.0).launch([spec]) == 1
    assert "waiting for inference at http://127.0.0.1:9 (" in capsys.readouterr().out


def test_sigint_stops_everything(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys, pathlib
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_local_launcher import _spec, SERVER, _launcher
        tmp = pathlib.Path({str(tmp_path)!r})
        specs = [_spec(tmp, "server", SERVER.format(name="server"), ready=True),
                 _spec(tmp, "orchestrator", "time.sleep(60)\\n"), _spec(tmp, "trainer", "time.sleep(60)\\n")]
        sys.exit(_launcher(tmp).launch(specs))
    """)
    )
    proc = subprocess.Popen([PY, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (tmp_path / "trainer.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "SIGINT received" in err
    for name in ("server", "orchestrator", "trainer"):
        assert not _alive(tmp_path, name), name


def test_gpu_counts_must_fit():
    with pytest.raises(ValueError, match=r"num_train_gpus \(2\) \+ num_infer_gpus \(1\) exceeds gpus_per_node \(2\)"):
        LocalLauncher.Config(gpus_per_node=2, num_train_gpus=2, num_infer_gpus=1)


def test_registered_as_local():
    from prl.plugins import get_registry

    assert get_registry().get("launchers", "local") is LocalLauncher


def test_watchdog_reports_reach_the_console(tmp_path, capsys):
    code = "print('2026 WARNING prl.orchestrator: waiting for batch step 1: 0/8 traces ready')\n"
    assert _launcher(tmp_path).launch([_spec(tmp_path, "orchestrator", code)]) == 0
    assert "[orchestrator] waiting for batch step 1: 0/8 traces ready" in capsys.readouterr().out


def test_a_usage_error_ends_the_run_with_its_one_line_and_exit_2(tmp_path, capsys):
    specs = [
        _spec(tmp_path, "server", SERVER.format(name="server"), ready=True),
        _spec(
            tmp_path,
            "trainer",
            "print('loading'); print('Error: --trainer.loss.ratio_low: bad', file=sys.stderr); sys.exit(2)\n",
        ),
    ]
    assert _launcher(tmp_path).launch(specs) == 2
    err = capsys.readouterr().err
    assert err.strip() == "prl: trainer: Error: --trainer.loss.ratio_low: bad"
    assert not _alive(tmp_path, "server")


def test_gpus_are_placed_by_role(tmp_path):
    code = (
        "gpus = os.environ.get('CUDA_VISIBLE_DEVICES', '-')\n"
        "pathlib.Path(os.environ['PRL_TEST_DIR'], sys.argv[0] + '{name}.gpus').write_text(gpus)\n"
    )
    specs = [_spec(tmp_path, n, code.format(name=n)) for n in ("inference", "orchestrator", "trainer")]
    assert _launcher(tmp_path, gpus_per_node=4, num_infer_gpus=1, num_train_gpus=3).launch(specs) == 0
    got = {n: (tmp_path / f"-c{n}.gpus").read_text() for n in ("inference", "orchestrator", "trainer")}
    assert got == {"inference": "0", "orchestrator": "-", "trainer": "1,2,3"}
