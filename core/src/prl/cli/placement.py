"""Where a launched run's processes go and how they find each other, decided before any
starts: free ports picked for port 0 (and every client told), ports checked free, inference
engines and trainer ranks placed on ``[deployment]``'s GPUs, the weight transport sized.
Used by ``prl rl`` and ``prl sft`` (prl.cli.commands)."""

from __future__ import annotations


def pin_inference_port(inference) -> bool:
    """``server.port = 0`` under a launcher means any free port: pick it now, so the clients
    started beside the server are told the same one. True when a port was picked."""
    if inference is None or inference.server.port != 0:
        return False
    from prl.serving import free_port

    inference.server.port = free_port(inference.server.host)
    return True


def dials_port_zero(url: str) -> bool:
    """A client URL written for a managed server on port 0 (``http://host:0``): it means
    that server, wherever its port is pinned."""
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).port == 0
    except ValueError:
        return False


def check_inference_ports(cfg) -> None:
    """A taken inference port stops a launch here, in one line naming the flag, before any
    process starts (not for a dry run, nor for a batch scheduler's job on another node)."""
    if cfg.inference is None or cfg.dry_run or cfg.deployment.submits:
        return
    from prl.serving import inference_ports_free

    inference_ports_free(cfg.inference, "inference.")


def pin_rollout_port(trainer, orchestrator) -> None:
    """``rollout_transport.port = 0`` (zmq) means any free port: pick it before launch and
    give trainer and orchestrator the same one."""
    transport = orchestrator.rollout_transport
    if transport.type != "zmq" or transport.port != 0:
        return
    from prl.serving import free_listen_port

    port = free_listen_port(transport.host)
    transport.port = trainer.rollout_transport.port = port


def bind_weight_transport(cfg, inference, components) -> None:
    """Let the weight transport size itself for this run's inference workers, then hand
    every component the same settings (ports picked here, not once per process)."""
    # Behind a router every engine joins the broadcast group: the workers of all of them.
    workers = inference.backend.worker_count() * (inference.server.engines or 1) if inference is not None else 1
    cfg.weight_broadcast.bind_run(workers)
    for component in components:
        component.weight_broadcast = cfg.weight_broadcast.model_copy()


def place_inference(cfg) -> None:
    """Engines behind the router from ``[deployment]``, and the GPU counts checked against
    this machine when it is the one that runs them (not for a batch scheduler's job)."""
    from prl.engines import resolve_engines
    from prl.gpus import check_deployment

    if not cfg.deployment.submits:
        check_deployment(cfg.deployment)
    if cfg.inference is not None:
        resolve_engines(cfg.inference, cfg.deployment)
