"""The flags that set config keys (``override``) and ``--config``: what a command's parser is built from,
without the config dataclasses (``_config``: they load torch and Numba). A command's parser is built
only when it runs (``build_parser``); the defaults its help shows are taken from the config dataclasses
then (``_config.show_config_defaults``)."""

from __future__ import annotations

import argparse

FLAG = "flag:"  # namespace entries naming the flag of each config key a flag overrides
CONFIG_KEY = "cfg:"  # the dest of a flag that overrides config keys: "cfg:" + the keys, comma-separated


def add_config_option(parser: argparse.ArgumentParser, sections: str = "kafka") -> None:
    parser.add_argument(
        "--config",
        metavar="FILE.yaml",
        help=f"settings shared by every job; this command reads sections {sections} (keys: the Python "
        "config dataclasses'; STREAMGNN_SECTION__KEY variables and flags override it), e.g. cluster.yaml",
    )


def override(parser, *flags: str, key: str | tuple[str, ...], **kw) -> None:
    """A flag that overrides config key ``key`` ("serve.port"), or each of several keys, when given;
    a positional argument when ``flags`` is empty."""
    dest = CONFIG_KEY + ",".join((key,) if isinstance(key, str) else key)
    if flags:
        if "choices" not in kw and kw.get("action") is None:  # as argparse names it, not after the dest
            kw.setdefault("metavar", flags[-1].lstrip("-").upper().replace("-", "_"))
        parser.add_argument(*flags, dest=dest, default=None, **kw)
        parser.set_defaults(**{FLAG + dest: flags[-1]})  # how an error about its value names it
    else:
        parser.add_argument(dest, nargs="?", default=None, **kw)


def sets_config(parser: argparse.ArgumentParser) -> bool:
    """Whether ``parser``, or a subcommand of it, has a flag that overrides a config key."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            if any(sets_config(command) for command in action.choices.values()):
                return True
        elif action.dest.startswith(CONFIG_KEY):
            return True
    return False
