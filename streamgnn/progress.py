"""Progress bars that show in any terminal: tqdm sized to the terminal, or to 100 columns where the
terminal reports no width (``docker run -t``, some CI and serial consoles say 0 columns, and a bar sized to
0 columns prints nothing at all)."""

from __future__ import annotations

import shutil

from tqdm import tqdm


def progress_bar(**kw) -> tqdm:
    """``tqdm(**kw)`` that follows the terminal's width when it has one, else 100 columns."""
    if shutil.get_terminal_size((0, 0)).columns > 0:
        return tqdm(dynamic_ncols=True, **kw)
    return tqdm(ncols=100, nrows=20, **kw)  # both: a 0-row terminal hides the bar too
