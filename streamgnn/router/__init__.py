"""The partition router, an application over the partitioners: a raw event topic in, the same events out,
keyed and placed by graph partition (``PartitionRouter``, ``streamgnn partition --out``); ``RoutingState`` is
the part of it that needs no broker.
"""

from .router import PartitionRouter
from .routing import RoutingState

__all__ = ["PartitionRouter", "RoutingState"]
