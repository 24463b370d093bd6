"""streamgnn: learning on graphs that never stop changing."""

from .errors import StreamGNNError
from .events import DeadLetter, EventBatch, EventKind

__version__ = "0.1.0"
__all__ = ["DeadLetter", "EventBatch", "EventKind", "StreamGNNError", "__version__"]
