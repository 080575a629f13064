"""The ``prl`` command: a typer app whose config commands parse their own arguments."""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable

import typer

from prl import __version__
from prl.cli import commands
from prl.cli.errors import USAGE_EXIT, MissingMachinery, print_error
from prl.cli.new import new_app
from prl.config.errors import ConfigError, RunError, host_error

# OSErrors that the machine, not prl, causes: said in one line instead of a traceback.
HOST_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.EADDRINUSE, errno.EFBIG}

app = typer.Typer(
    name="prl",
    help="prl: asynchronous RL and SFT post-training of LLMs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# Config commands take `@ file` and dotted flags that typer must pass through untouched.
_PASS = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def _run(fn: Callable[[list[str]], int], argv: list[str]) -> None:
    from prl.plugins import PluginError

    try:
        code = fn(argv)
    except ConfigError as exc:
        print_error(exc.message, exc.title)
        raise typer.Exit(USAGE_EXIT) from None
    except PluginError as exc:
        print_error(str(exc), "Plugin error")
        raise typer.Exit(USAGE_EXIT) from None
    except MissingMachinery as exc:
        print_error(str(exc), "Not available")
        raise typer.Exit(1) from None
    except RunError as exc:
        print_error(str(exc), "Run error")
        raise typer.Exit(1) from None
    except OSError as exc:
        if exc.errno not in HOST_ERRNOS:
            raise
        err = host_error(exc, f"prl {getattr(fn, '__name__', '').removeprefix('cmd_').replace('_', '-')}")
        print_error(err.message, err.title)
        raise typer.Exit(USAGE_EXIT) from None
    raise typer.Exit(code)


def _config_command(name: str, fn: Callable[[list[str]], int], doc: str) -> None:
    def command(ctx: typer.Context) -> None:
        _run(fn, list(ctx.args))

    command.__doc__ = doc
    app.command(name, context_settings=_PASS, add_help_option=False)(command)


_config_command("rl", commands.cmd_rl, "Run inference, env servers, orchestrator and trainer (RLConfig).")
_config_command("sft", commands.cmd_sft, "Supervised fine-tuning (SFTConfig).")
_config_command("eval", commands.cmd_eval, "Evaluate against a running inference server (EvalConfig).")
_config_command("inference", commands.cmd_inference, "Start an inference server (InferenceConfig).")
_config_command("orchestrator", commands.cmd_orchestrator, "Run the orchestrator alone (OrchestratorConfig).")
_config_command("trainer", commands.cmd_trainer, "Run the RL trainer alone (TrainerConfig).")
_config_command("env-server", commands.cmd_env_server, "Serve one source's environment (SourceConfig).")
_config_command("sft-trainer", commands.cmd_sft_trainer, "Run the SFT trainer alone, no run set-up (SFTConfig).")
_config_command("online-eval", commands.cmd_online_eval, "Evaluate an SFT run's broadcast weights (SFTConfig).")
_config_command("doctor", commands.cmd_doctor, "Check this machine against an RL config (versions, GPUs, disk...).")


def cmd_fetch(argv: list[str]) -> int:
    from prl.cli.fetch_cmd import cmd_fetch as fetch

    return fetch(argv)


_config_command("fetch", cmd_fetch, "Download the models and datasets a config names into the HF cache.")


app.add_typer(new_app)


@app.command("plugins")
def plugins_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List installed plugin distributions and what each registers."""
    from prl.cli.plugins_cmd import show_plugins

    _run(lambda _argv: show_plugins(as_json), [])


def installed_version() -> str:
    """The installed prl-core distribution's version (what pip reports), else the source's."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("prl-core")
    except PackageNotFoundError:
        return __version__


def _print_version(value: bool) -> None:
    if value:
        print(f"prl {installed_version()}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", help="Print the prl-core version and exit.", callback=_print_version, is_eager=True
    ),
) -> None:
    """prl: asynchronous RL and SFT post-training of LLMs."""


@app.command("version")
def version_cmd() -> None:
    """Print the prl-core version."""
    print(installed_version())


def _add_plugin_commands() -> None:
    from prl.plugins import PluginError, get_registry

    try:
        get_registry().pm.hook.prl_add_commands(app=app)
    except PluginError as exc:
        print_error(str(exc), "Plugin error")
        sys.exit(USAGE_EXIT)
    names = [c.name for c in app.registered_commands] + [g.name for g in app.registered_groups]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        print_error(f"command name(s) claimed twice by plugins: {', '.join(dup)}", "Plugin error")
        sys.exit(USAGE_EXIT)


def _missing_command_hint(argv: list[str]) -> None:
    """``prl dashboard`` without the distribution that adds it: say what to install (exit 2)
    instead of typer's bare "No such command"."""
    from prl.known_plugins import install_hint

    name = argv[1] if len(argv) > 1 and not argv[1].startswith("-") else None
    registered = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    hint = install_hint("commands", name) if name and name not in registered else ""
    if hint:
        print_error(f"the command 'prl {name}' is not installed{hint}", "Not available")
        sys.exit(USAGE_EXIT)


def main() -> None:
    _add_plugin_commands()
    _missing_command_hint(sys.argv)
    app(prog_name="prl")
