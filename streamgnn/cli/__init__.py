"""The ``streamgnn`` command: one subcommand per module of this package.

Each module ``streamgnn/cli/<name>.py`` (names without a leading underscore) is the subcommand ``<name>``:
it defines ``HELP`` (its line in ``streamgnn --help``) and ``register(subparsers)``, which adds its parser
(``help=HELP``) and sets ``func(args, rest) -> int``. Adding a command is adding a file; nothing here lists
them.

Only the command a run names is built (``build_parser``): its module's ``register`` and, where it has
flags that set config keys, the config dataclasses whose defaults its help shows. Those load torch and
Numba (seconds of CPU), so a command module imports only argparse helpers at its top, and what its flags
or its run need inside ``register`` and its ``func``: ``streamgnn --help``, ``streamgnn bench --help``
or ``streamgnn datasets`` load neither.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence

# First, before torch or Numba loads (a command's config classes and its run import them): passive OpenMP
# waiting and explicit pool sizes, unless the user set their own (``_threads``).
from . import _threads  # noqa: F401, I001
from ._flags import sets_config

# Commands whose extra arguments go to the job they start (a benchmark parses its own flags).
_PASS_THROUGH = {"bench"}


def command_modules() -> list[str]:
    """Names of the subcommand modules, sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


class _Parser(argparse.ArgumentParser):
    """A mistake in the arguments is one line naming it (the usage is one ``--help`` away); every
    subcommand's parser is of this class too (``add_subparsers`` makes its parsers of the parent's class)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of ``argv``'s command (its first argument that is not an option): every command is
    listed by its ``HELP``, only that one is built (module docstring). None: every command is built."""
    p = _Parser(
        prog="streamgnn",
        description="streamgnn: learning on graphs that never stop changing. Run `streamgnn COMMAND --help`.",
    )
    named = None if argv is None else next((a for a in argv if not a.startswith("-")), "")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in command_modules():
        module = importlib.import_module(f"{__name__}.{name}")
        if named is not None and name != named:
            sub.add_parser(name, help=module.HELP)  # listed, never parsed with
            continue
        module.register(sub)  # (here, so that main() holds a Ctrl-C while it loads torch)
        if sets_config(sub.choices[name]):
            from ._config import show_config_defaults  # the config classes: torch, Numba

            show_config_defaults(sub.choices[name])
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command. A Ctrl-C while the commands load (torch, Numba: seconds) ends it as one during
    the command does: one line, status 130, no traceback."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("streamgnn: interrupted", file=sys.stderr, flush=True)
        return 130


def _main(argv: list[str] | None) -> int:
    from ..errors import StreamGNNError
    from ..rankfail import ends_job_on_error
    from ._args import forget_new_folders, remove_new_empty_folders

    forget_new_folders()  # an earlier call in this process (tests run many) noted its own
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args, rest = parser.parse_known_args(argv)
    if rest and args.command not in _PASS_THROUGH:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    # parsing checked the output folders (and noted the ones a run would create); a failed run removes
    # those it left empty
    code = 1
    try:
        # one rank of an MPI or torch.distributed job that fails ends the job (a fault-tolerant agents run
        # outlives its failed ranks by design)
        with ends_job_on_error(enabled=not getattr(args, "fault_tolerant", False)):
            code = args.func(args, rest)
        return code
    except StreamGNNError as exc:  # a user's mistake or a broken input: the message says what to do
        code = _error(str(exc))
        return code
    except OSError as exc:  # a path the checks could not foresee (a full disk, a port taken, a race)
        what = f"{exc.filename}: " if exc.filename else ""
        code = _error(f"{what}{exc.strerror or exc}")
        return code
    except KeyboardInterrupt:  # Ctrl-C: the command's with blocks have closed what it held on the way out
        print(f"streamgnn {args.command}: interrupted", file=sys.stderr, flush=True)
        code = 130  # the shell's status for a command ended by SIGINT
        return code
    except SystemExit as exc:  # a benchmark's own parser, a supervised agent's exit
        code = exc.code if isinstance(exc.code, int) else 1
        raise
    finally:
        if code != 0 and not _one_rank_of_several():  # the ranks of a job share their folders
            remove_new_empty_folders()
        forget_new_folders()
        if code != 0 and args.command == "agents":
            from ..agents.runtime import finish, supervised

            if supervised():  # a supervised agent never reaches MPI_Finalize: it would wait for dead ranks
                finish(code)


def _one_rank_of_several() -> bool:
    """Is this process one rank of an MPI or torch.distributed job (its launcher's environment says so)?"""
    sizes = (os.environ.get(k, "1") for k in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "WORLD_SIZE"))
    return any(size.isdigit() and int(size) > 1 for size in sizes)


def _error(message: str) -> int:
    """One line on stderr (a message's own line breaks folded), exit status 2."""
    print(f"streamgnn: error: {' '.join(message.split())}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
