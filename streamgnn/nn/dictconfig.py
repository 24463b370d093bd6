"""A base for dataclass configs that travel as plain dicts (JSON summaries, checkpoints).

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Knobs(DictConfig):
...     taps: int = 3
>>> Knobs.from_dict({"taps": 4}).to_dict()
{'taps': 4}
>>> Knobs.from_dict({"tabs": 4})
Traceback (most recent call last):
...
streamgnn.errors.ConfigError: unknown Knobs keys: ['tabs']
"""

from __future__ import annotations

import dataclasses

from ..errors import ConfigError


class DictConfig:
    """``from_dict`` refuses keys the dataclass does not have (a typo is an error, not a default);
    ``to_dict`` is ``dataclasses.asdict``."""

    @classmethod
    def from_dict(cls, data: dict):
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ConfigError(f"unknown {cls.__name__} keys: {unknown}")
        return cls(**data)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
