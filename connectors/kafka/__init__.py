"""Kafka in and out: ``KafkaSource`` turns topics into EventBatches, ``EventProducer`` writes them keyed
by graph partition, ``produce_dataset`` loads a dataset into a topic, ``Producer`` sends raw messages.

Delivery is effectively-once. The source tracks, per partition, the offset after the last message it
handed out (``positions()``); saving those offsets inside the store checkpoint and seeking to them on
restart replays exactly what the checkpoint lacks, and the store skips replayed event ids. Offsets are
also committed to Kafka, for lag monitoring and for the next owner after a rebalance, but the checkpoint
wins wherever it names a partition.

Two clients are supported with the same behaviour: ``backend="kafka-python"`` (default, pure Python) and
``backend="confluent"`` (librdkafka, where ``confluent-kafka`` is installed). Client settings, TLS and SASL
included, pass through unchanged in each client's own spelling (``security_protocol`` for kafka-python,
``security.protocol`` for confluent). Settings are never logged, and dead letters carry only the reason
and the message's topic, partition and offset, so credentials cannot leak through either.

The package, by seam: ``settings`` (clients, settings), ``admin`` (topics), ``producer`` (writing),
``consumer`` (the one interface over ``kafka_python`` and ``confluent``), ``decoding`` (messages into
rows), ``dead_letters``, ``merge`` (partitions into one time-ordered stream, no broker needed),
``source`` (``KafkaSource``, the facade) and ``reading`` (``TopicReader``: a topic read directly, for
either client). No module outside the connectors imports a Kafka client.

>>> from streamgnn.connectors.kafka import KafkaSource, create_topic, produce_dataset
"""

from .admin import create_topic
from .consumer import partition_key
from .producer import (
    CONTENT_TYPE_HEADER,
    FORMATS,
    TRUNCATED_HEADER,
    EventProducer,
    Producer,
    ProduceReport,
    produce_dataset,
)
from .reading import Record, TopicReader, read_topic
from .settings import BACKENDS, available_backends
from .source import KafkaSource, SourceStats

__all__ = [
    "BACKENDS",
    "CONTENT_TYPE_HEADER",
    "FORMATS",
    "TRUNCATED_HEADER",
    "EventProducer",
    "KafkaSource",
    "ProduceReport",
    "Producer",
    "Record",
    "SourceStats",
    "TopicReader",
    "available_backends",
    "create_topic",
    "partition_key",
    "produce_dataset",
    "read_topic",
]
