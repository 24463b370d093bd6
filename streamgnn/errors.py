"""The exceptions streamgnn raises. Catch ``StreamGNNError`` to handle any of them."""


class StreamGNNError(Exception):
    """Base of every error raised by streamgnn."""


class EventValidationError(StreamGNNError, ValueError):
    """An event or batch breaks the event schema; the message names the field and row."""


class CodecError(StreamGNNError, ValueError):
    """A payload could not be decoded (bad magic, version, truncated column, malformed JSON)."""


class UnknownNodeError(StreamGNNError, KeyError):
    """A query named a node id the store has never seen."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class CheckpointError(StreamGNNError):
    """A checkpoint is missing, truncated, tampered with or of an unsupported format."""


class ConfigError(StreamGNNError, ValueError):
    """A configuration value is out of range or inconsistent with the stream."""


class PlacementError(ConfigError):
    """Events a run was told to place by their ``placement`` column (a partition router's output) lack it,
    or contradict it: the topic was not written by one router with the run's partition count."""


class ConnectorError(StreamGNNError):
    """A source or sink failed in a way that retrying will not fix."""


class OffsetOutOfRangeError(ConnectorError):
    """A partition's next offset lies outside its log: the topic was recreated or truncated (a broker that
    lost its data, retention that deleted unread events). Reading on would skip events, so the source stops;
    the message names the partition, the offset and the log's range."""


class SnapshotError(StreamGNNError, ValueError):
    """A snapshot cannot be cut as asked (a time before the last one, a node beyond a fixed node count)."""


class RankEndedError(StreamGNNError):
    """A rank of an MPI job ended (killed, or failed) before sending what this rank cannot go on without:
    the message names it and what was missing."""
