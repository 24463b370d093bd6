"""The ``streamgnn`` command: one subcommand per module of this package.

Each module ``streamgnn/cli/<name>.py`` (names without a leading underscore) is the subcommand ``<name>``:
it defines ``register(subparsers)``, which adds its parser and sets ``func(args, rest) -> int``. Adding a
command is adding a file; nothing here lists them.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

# Before torch loads: OpenMP threads that spin while waiting made a 2-core machine 5-18x slower (the demo's
# trainer against its own broker and Kafka client); a user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

# Commands whose extra arguments go to the job they start (a benchmark parses its own flags).
_PASS_THROUGH = {"bench"}


def command_modules() -> list[str]:
    """Names of the subcommand modules, sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="streamgnn",
        description="streamgnn: learning on graphs that never stop changing. Run `streamgnn COMMAND --help`.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in command_modules():
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and args.command not in _PASS_THROUGH:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    from ..errors import StreamGNNError
    from ..rankfail import ends_job_on_error

    try:
        # one rank of an MPI or torch.distributed job that fails ends the job (a fault-tolerant agents run
        # outlives its failed ranks by design)
        with ends_job_on_error(enabled=not getattr(args, "fault_tolerant", False)):
            return args.func(args, rest)
    except StreamGNNError as exc:  # a user's mistake or a broken input: the message says what to do
        print(f"streamgnn: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
