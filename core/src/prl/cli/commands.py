"""The config-driven commands: rl, sft, eval, inference, orchestrator, trainer, env-server,
sft-trainer and online-eval (the children of `prl sft` with online eval).

Each resolves its root config from ``@ files`` and flags, then hands over to the installed
machinery; a missing piece is named plainly and the command exits non-zero.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from prl.cli.errors import MissingMachinery
from prl.cli.placement import (
    bind_weight_transport,
    check_inference_ports,
    dials_port_zero,
    pin_inference_port,
    pin_rollout_port,
    place_inference,
)
from prl.config.errors import ConfigError, HostError
from prl.config.help import render_help
from prl.config.launcher_sections import sections_set
from prl.config.model_paths import (
    check_eval_image_sources,
    check_image_sources,
    check_renderers,
    check_trained_model,
    needs_of,
)
from prl.config.resolve import Resolved, resolve
from prl.logs import LOG_FILE_ENV
from prl.plugins import TRAINERS, Kind, PluginError, get_registry
from prl.runs import RunPaths, generate_name, prepare_run, run_dir_of
from prl.summary import print_lines, run_reported, start_lines

T = TypeVar("T")


def _resolve_or_help(root: type[BaseModel], argv: list[str], prog: str, **kw) -> Resolved | None:
    display = {"--plain", "--no-wide", "--wide"}
    res = resolve(root, [a for a in argv if a not in display] if _wants_help(argv) else argv, prog=prog, **kw)
    if res.parsed.help:
        section = res.parsed.help_section
        render_help(root, prog, plain="--plain" in argv, wide="--no-wide" not in argv, section=section)
        return None
    return res


def _wants_help(argv: list[str]) -> bool:
    return "-h" in argv or "--help" in argv


def _plugin(kind: Kind[T], tag: str) -> type[T]:
    if not tag:
        raise MissingMachinery(f"no {kind.label} plugin is installed")
    try:
        return get_registry().get(kind, tag)
    except PluginError as exc:
        raise MissingMachinery(str(exc)) from None


def _prepare(entry: str, cfg, res: Resolved, resolved: dict, rl: bool = False) -> RunPaths:
    run_dir = run_dir_of(cfg.output_dir, cfg.run.name, cfg.run.dir)
    try:
        paths = prepare_run(
            entry,
            res.parsed_argv,
            res.parsed.root_files,
            run_dir,
            cfg.output_dir,
            resolved,
            clean=getattr(cfg, "clean", False),
            resume=getattr(cfg, "resume", None),
            rl=rl,
        )
    except OSError as exc:
        if isinstance(exc, ConfigError):
            raise
        # Said before any process starts, in one line, instead of a traceback from mkdir.
        raise HostError(
            f"cannot write the run directory {run_dir}: {exc.strerror or exc}; "
            "set output_dir (or $PRL_OUTPUT_DIR) to a writable directory"
        ) from None
    os.environ["PRL_RUN_NAME"] = cfg.run.name
    os.environ["PRL_RUN_ID"] = cfg.run.name
    os.environ["PRL_ATTEMPT_CONFIG_DIR"] = str(paths.config_dir)
    os.environ["PRL_ATTEMPT_LOG_DIR"] = str(paths.log_dir)
    return paths


def _export_env_vars(cfg) -> None:
    """``env_vars`` of a command that runs in this process: set here, so that this process
    and everything it starts (torchrun ranks, env servers) see them."""
    os.environ.update({k: str(v) for k, v in cfg.env_vars.items()})


def _models_and_data(cfg, res: Resolved, dry_run: bool = False) -> None:
    """The models and datasets the config names: paths checked, and hub ids not yet cached
    fetched now, before any component starts (a dry run lists them and fetches nothing).
    The launchers start trainer and inference reading the cache only (prl.hub.READ_CACHE_ENV)."""
    from prl import hub

    needs = needs_of(cfg, res.merged)
    if dry_run:
        for planned in hub.plan(needs):
            print(planned.line())
        return
    hub.fetch(needs)


def _load_from_cache_only() -> None:
    """A command that loads weights in this process (or its torchrun ranks), after
    :func:`_models_and_data`: the snapshot just checked, with no request per file."""
    from prl import hub

    hub.read_cache_only()


def _dry_run_done(paths: RunPaths) -> int:
    print(f"Dry run complete: configs written to {paths.config_dir}. Remove --dry-run to launch.")
    return 0


def _share_identity(cfg, *components) -> None:
    for comp in components:
        if comp is not None:
            comp.run = cfg.run.model_copy()
            comp.output_dir = cfg.output_dir


def cmd_rl(argv: list[str]) -> int:
    from prl.config.roots import RLConfig

    if "--explain" in argv:
        return _explain([a for a in argv if a != "--explain"])
    res = _resolve_or_help(RLConfig, argv, "prl rl")
    if res is None:
        return 0
    res.parsed_argv = argv
    cfg = res.config
    _models_and_data(cfg, res, cfg.dry_run)
    check_renderers(cfg)
    check_trained_model(cfg)
    check_image_sources(cfg)
    if cfg.run.name is None:
        cfg.run.name = generate_name([s.name for s in cfg.orchestrator.train.source], cfg.model.name)
    _share_identity(cfg, cfg.trainer, cfg.orchestrator, cfg.inference)
    client_set = "base_url" in (res.merged.get("orchestrator", {}).get("client") or {})
    place_inference(cfg)
    pin_inference_port(cfg.inference)
    pin_rollout_port(cfg.trainer, cfg.orchestrator)
    bind_weight_transport(cfg, cfg.inference, [cfg.trainer, cfg.orchestrator])
    if cfg.inference is not None and (not client_set or dials_port_zero(cfg.orchestrator.client.base_url)):
        cfg.orchestrator.client.base_url = f"http://{cfg.inference.server.host}:{cfg.inference.server.port}"
    check_inference_ports(cfg)
    resolved: dict = {"trainer": cfg.trainer, "orchestrator": cfg.orchestrator}
    if cfg.inference is not None:
        resolved["inference"] = _placed_inference(cfg, "prl rl")
    for split, sources in (
        ("train", cfg.orchestrator.train.source),
        ("eval", cfg.orchestrator.eval.source if cfg.orchestrator.eval else []),
    ):
        for source in sources:
            resolved[f"envs/{split}/{source.name}"] = source
    paths = _prepare("rl", cfg, res, resolved, rl=True)
    if cfg.dry_run and not cfg.deployment.submits:
        return _dry_run_done(paths)
    try:
        from prl.rl_launch import build_processes
    except ImportError as exc:
        raise MissingMachinery(f"the RL launch plan (prl.rl_launch) is not available: {exc}") from None
    processes = build_processes(cfg, paths.run_dir, paths.config_dir, paths.log_dir, clear_scratch=not cfg.dry_run)
    return _launch("rl", cfg, paths, processes)


def _explain(argv: list[str]) -> int:
    """``prl rl ... --explain``: resolve as ``prl rl`` does (same usage errors), print what
    the config means (prl.explain) and exit 0 without making a run directory."""
    from prl.config.roots import RLConfig
    from prl.explain import explain_rl

    res = _resolve_or_help(RLConfig, argv, "prl rl")
    if res is None:
        return 0
    for line in explain_rl(res.config):
        print(line)
    return 0


def cmd_doctor(argv: list[str]) -> int:
    """``prl doctor @ cfg.toml``: check this machine against an RL config (prl.doctor); one
    line per check, exit 1 when any found a problem. Nothing is created or started."""
    from prl.config.roots import RLConfig
    from prl.doctor import doctor_rl

    res = _resolve_or_help(RLConfig, argv, "prl doctor")
    if res is None:
        return 0
    report = doctor_rl(res.config, res.merged)
    for line in report.oks:
        print(f"ok       {line}")
    for line in report.problems:
        print(f"PROBLEM  {line}")
    if report.problems:
        n = len(report.problems)
        print(f"prl doctor: {n} problem{'s' if n > 1 else ''} found")
        return 1
    print(f"prl doctor: all {len(report.oks)} checks passed")
    return 0


def _placed_inference(cfg, entry: str):
    """The inference config of the server a run's own launcher starts. A launcher's section
    in it (filled from the run's, e.g. ``[slurm]``) only says the run is under that
    launcher, where the server runs inside the run's job: the child's resolved config has
    none, so it serves where it is started instead of submitting a job of its own."""
    inference = cfg.inference
    own = sections_set(inference)
    for name in own:
        if getattr(cfg, name, None) is None:
            raise ConfigError(
                f"--inference.{name}: {entry} starts its inference server itself, not as a job of its own; "
                f"set the top-level [{name}] to submit the whole run, or drop inference.{name}"
            )
    return inference.model_copy(update=dict.fromkeys(own)) if own else inference


def _launch(entry: str, cfg, paths: RunPaths, processes: list) -> int:
    """Hand the plan to the ``[deployment]`` launcher; a dry run only renders it there. A
    run supervised from here says where it logs as it starts and sums up when it ends; a
    batch scheduler's launcher returns once the job is submitted, with nothing to sum up."""
    launcher = cfg.deployment.build(run_dir=paths.run_dir, root=cfg)
    if cfg.dry_run:
        launcher.dry_run(processes)
        return _dry_run_done(paths)
    if cfg.deployment.submits:
        return launcher.launch(processes)
    logs = {p.name: p.log_path for p in processes}
    return run_reported(entry, paths.run_dir, paths.log_dir, logs, lambda: launcher.launch(processes))


def cmd_sft(argv: list[str]) -> int:
    from prl.config.roots import SFTConfig

    res = _resolve_or_help(SFTConfig, argv, "prl sft")
    if res is None:
        return 0
    res.parsed_argv = argv
    cfg = res.config
    _models_and_data(cfg, res, cfg.dry_run)
    check_renderers(cfg)
    check_trained_model(cfg)
    if cfg.run.name is None:
        cfg.run.name = generate_name([Path(cfg.data.name.rstrip("/")).stem], cfg.model.name)
    submits = cfg.deployment.submits
    trainer_cls = None if cfg.dry_run or submits else _plugin(TRAINERS, cfg.trainer_type)
    zero_url = cfg.inference is not None and dials_port_zero(cfg.eval.client.base_url)
    if pin_inference_port(cfg.inference) and zero_url:
        server = cfg.inference.server
        cfg.eval.client.base_url = f"http://{server.host}:{server.port}"
    _share_identity(cfg, cfg.inference)
    place_inference(cfg)
    check_inference_ports(cfg)
    if cfg.inference is not None:
        engines = cfg.inference.server.engines or 1
        cfg.weight_broadcast.bind_run(cfg.inference.backend.worker_count() * engines)
    resolved: dict = {"sft": cfg}
    if cfg.inference is not None:
        resolved["inference"] = _placed_inference(cfg, "prl sft")
    for source in cfg.eval.source if cfg.eval is not None else []:
        resolved[f"envs/eval/{source.name}"] = source
    paths = _prepare("sft", cfg, res, resolved)
    if cfg.dry_run and not submits:
        return _dry_run_done(paths)
    if cfg.eval is not None or submits:
        # Online eval needs inference and an evaluator next to the trainer, and a batch
        # scheduler runs the trainer inside its job: the launcher runs them (prl.sft_launch).
        from prl.sft_launch import build_processes

        processes = build_processes(cfg, paths.run_dir, paths.config_dir, paths.log_dir, clear_scratch=not cfg.dry_run)
        return _launch("sft", cfg, paths, processes)
    # Trained in this process (or its torchrun ranks): the lines a launcher would have put
    # in the trainer's log file go there too, and env_vars apply here as to any child.
    _export_env_vars(cfg)
    _load_from_cache_only()
    log_file = paths.log_dir / "trainer.log"
    os.environ[LOG_FILE_ENV] = str(log_file)
    try:

        def train() -> int:
            return int(trainer_cls.run_sft(cfg) or 0)

        return run_reported("sft", paths.run_dir, paths.log_dir, {"trainer": log_file}, train, in_process=True)
    finally:
        os.environ.pop(LOG_FILE_ENV, None)


def cmd_sft_trainer(argv: list[str]) -> int:
    from prl.config.roots import SFTConfig

    res = _resolve_or_help(SFTConfig, argv, "prl sft-trainer")
    if res is None:
        return 0
    cfg = res.config
    return int(_plugin(TRAINERS, cfg.trainer_type).run_sft(cfg) or 0)


def cmd_online_eval(argv: list[str]) -> int:
    from prl.config.roots import SFTConfig

    res = _resolve_or_help(SFTConfig, argv, "prl online-eval")
    if res is None:
        return 0
    cfg = res.config
    from prl.online_eval import run_online_eval

    name = cfg.run.name or "sft"
    return int(run_online_eval(cfg, run_dir_of(cfg.output_dir, name, cfg.run.dir)) or 0)


def cmd_eval(argv: list[str]) -> int:
    from prl.cli.eval_shortcuts import SHORT, expand_argv, positional_source
    from prl.config.roots import EvalConfig

    argv2 = expand_argv(argv)
    res = _resolve_or_help(EvalConfig, argv2, "prl eval", short=SHORT, positionals=positional_source)
    if res is None:
        return 0
    res.parsed_argv = argv
    cfg = res.config
    _refuse_shortcut_with_sources(res)
    if not cfg.source:
        raise ConfigError(
            "--source: no eval source given (add [[source]] blocks or a taskset id: prl eval reverse-text)"
        )
    try:
        from prl.eval import check_server, run_eval
    except ImportError as exc:
        raise MissingMachinery(f"prl eval's machinery (prl.eval) is not available: {exc}") from None
    if not cfg.dry_run:
        check_server(cfg)  # before any download and the run directory: nothing to clean up
    _models_and_data(cfg, res, cfg.dry_run)
    check_renderers(cfg)
    check_eval_image_sources(cfg)
    if cfg.run.name is None:
        cfg.run.name = generate_name([s.name for s in cfg.source], cfg.model.name)
    paths = _prepare("eval", cfg, res, {"eval": cfg})
    if cfg.dry_run:
        return _dry_run_done(paths)
    _export_env_vars(cfg)
    log_file = paths.log_dir / "eval.log"
    print_lines(start_lines(paths.run_dir, paths.log_dir, {"eval": log_file}))
    return int(run_eval(cfg, paths.run_dir, log_file) or 0)


def _refuse_shortcut_with_sources(res: Resolved) -> None:
    """``prl eval <taskset>`` builds the single source; sources from a file (or --source)
    would be replaced by it without a word, so the two together are a usage error."""
    from prl.config.resolve import merge_sources

    if res.parsed.positionals and merge_sources(res.parsed).get("source"):
        raise ConfigError(
            f"prl eval {res.parsed.positionals[0]}: a taskset id (with --env.* and -s) makes the single source "
            "and cannot be combined with [[source]] blocks; drop one or the other"
        )


def cmd_inference(argv: list[str]) -> int:
    from prl.config.components import InferenceConfig

    # --dry-run is the command's own flag (InferenceConfig is also a sub-config of rl/sft,
    # whose children must always serve): with a launcher's section ([slurm]) it renders the
    # job, else it validates.
    dry_run = "--dry-run" in argv
    res = _resolve_or_help(InferenceConfig, [a for a in argv if a != "--dry-run"], "prl inference")
    if res is None:
        return 0
    cfg = res.config
    _models_and_data(cfg, res, dry_run)
    if cfg.backend is None:
        raise MissingMachinery("no inference backend plugin is installed (pip install -e plugins/inference-torch)")
    own = sections_set(cfg)
    if own:
        return _submit_inference(cfg, res, argv, dry_run, own)
    if dry_run:
        print("Dry run complete: the config is valid. Remove --dry-run to serve.")
        return 0
    from prl.serving import inference_ports_free

    inference_ports_free(cfg)  # before the backend loads (vLLM would fail later, in its own words)
    _load_from_cache_only()
    if (cfg.server.engines or 1) > 1:
        from prl.engines import serve_engines

        return serve_engines(cfg, cfg.server.engines)
    cfg.backend.build(inference=cfg).serve()
    return 0


def _submit_inference(cfg, res: Resolved, argv: list[str], dry_run: bool, own: dict[str, str]) -> int:
    """``prl inference`` with a launcher's section (``[slurm]``): the server as a job of its
    own, through that launcher (which submits, prints where the server is reached and follows
    the job). The job serves ``resolved/inference.json``: the section cleared (the job serves
    instead of submitting again) and a loopback host widened to every interface, so clients
    off the node reach it."""
    from prl.plugins import LAUNCHERS
    from prl.rl_launch import child_env, inference_process
    from prl.runs import has_artifacts
    from prl.serving import is_loopback

    name, tag = next(iter(own.items()))  # the spec gives a server one launcher section
    launcher_cls = _plugin(LAUNCHERS, tag)
    if cfg.run.name is None:
        cfg.run.name = generate_name(["inference"], cfg.model.name)
    run_dir = run_dir_of(cfg.output_dir, cfg.run.name, cfg.run.dir)
    if has_artifacts(run_dir):
        raise ConfigError(f"--run.name: {run_dir} already holds an earlier run; choose another --run.name")
    child = cfg.model_copy(deep=True, update={name: None})
    if is_loopback(child.server.host):
        child.server.host = "0.0.0.0"
    res.parsed_argv = argv
    paths = _prepare("inference", cfg, res, {"inference": child})
    common = child_env(cfg, paths.run_dir, paths.config_dir, paths.log_dir)
    spec = inference_process(child, paths.resolved_dir, paths.log_dir, common)
    spec.service = False  # the job's only process: it serves until the job is cancelled
    launcher = launcher_cls(launcher_cls.Config(), paths.run_dir, root=cfg)
    if dry_run:
        launcher.dry_run([spec])
        return _dry_run_done(paths)
    return launcher.launch([spec])


def cmd_orchestrator(argv: list[str]) -> int:
    from prl.config.components import OrchestratorConfig

    res = _resolve_or_help(OrchestratorConfig, argv, "prl orchestrator")
    if res is None:
        return 0
    cfg = res.config
    _models_and_data(cfg, res)
    try:
        from prl.orchestrator.run import run_orchestrator
    except ImportError as exc:
        raise MissingMachinery(f"the orchestrator (prl.orchestrator) is not available: {exc}") from None
    name = cfg.run.name or "orchestrator"
    return int(run_orchestrator(cfg, run_dir_of(cfg.output_dir, name, cfg.run.dir)) or 0)


def cmd_trainer(argv: list[str]) -> int:
    from prl.config.components import TrainerConfig

    res = _resolve_or_help(TrainerConfig, argv, "prl trainer")
    if res is None:
        return 0
    cfg = res.config
    _models_and_data(cfg, res)
    _load_from_cache_only()
    return int(_plugin(TRAINERS, cfg.type).run_rl(cfg) or 0)


def cmd_env_server(argv: list[str]) -> int:
    from prl.config.components import SourceConfig

    res = _resolve_or_help(SourceConfig, argv, "prl env-server")
    if res is None:
        return 0
    if len(res.parsed.root_files) != 1:
        raise ConfigError(
            "prl env-server takes one resolved source file: "
            "prl env-server @ <run>/configs/latest/resolved/envs/train/<name>.json"
        )
    try:
        from prl.envs.server import main as serve_main
    except ImportError as exc:
        raise MissingMachinery(f"the env server (prl.envs.server) is not available: {exc}") from None
    return int(serve_main(res.parsed.root_files[0]) or 0)
