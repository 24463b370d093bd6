"""Training from a real Kafka topic: checkpoints carry the consumed offsets, a resumed trainer replays exactly
what its checkpoint lacks, and embeddings reach the sink topic."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from topic_records import read_topic

from streamgnn.checkpoint import read_latest
from streamgnn.connectors.kafka import EventProducer, KafkaSource
from streamgnn.connectors.sink import KafkaSink
from streamgnn.events import EventBatch
from streamgnn.nn import TGNConfig
from streamgnn.store import TemporalGraphStore
from streamgnn.train import OnlineTrainer, TrainConfig

torch.set_num_threads(1)


def node_keys(bootstrap: str, topic: str) -> set[int]:
    """The node ids keyed in ``topic`` (its writers closed: read to its end offsets)."""
    return {int(r.key) for r in read_topic(bootstrap, topic)}


# source batches of whole messages (100 events each), or of 70 events: checkpoints then fall inside messages
@pytest.mark.parametrize("source_batch", [100, 70])
def test_kafka_training_resumes_from_checkpointed_offsets(
    kafka_bootstrap, make_topic, tmp_path, source_batch
):
    rng = np.random.default_rng(2)
    n = 800
    events = EventBatch.from_columns(
        src=rng.integers(0, 40, n), dst=rng.integers(40, 60, n), t=np.arange(n, dtype=float), eid=np.arange(n)
    )
    topic, embeddings = make_topic(1), make_topic(1, compacted=True)
    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, dropout=0.0)
    cfg = TrainConfig(
        model=model, batch_size=50, eval_negatives=5, checkpoint_dir=str(tmp_path), checkpoint_every=1,
        publish_every=3,
    )  # fmt: skip

    def train(trainer: OnlineTrainer, max_events: int | None = None):
        with KafkaSource(
            topic, bootstrap_servers=kafka_bootstrap, store=trainer.store, max_batch_events=source_batch
        ) as src:
            stream = src.stream(idle_timeout_s=2.0)
            return trainer.fit(stream, positions=src.positions, max_events=max_events, progress=False)

    with EventProducer(kafka_bootstrap, topic, fmt="binary", batch_size=100) as out:
        out.send(events[:500])
        out.flush()
    with KafkaSink(kafka_bootstrap, embeddings_topic=embeddings) as sink:
        first = OnlineTrainer(cfg, sink=sink)
        train(first, max_events=450)  # stops inside a source batch: no checkpoint may claim its offsets
        assert first.learned == 450
    saved = OnlineTrainer.resume(tmp_path)
    assert 0 < saved.learned == saved.position < 450 and saved.store.source_offsets

    with EventProducer(kafka_bootstrap, topic, fmt="binary", batch_size=100) as out:
        out.send(events[500:])
        out.flush()
    with KafkaSink(kafka_bootstrap, embeddings_topic=embeddings) as sink:
        resumed = OnlineTrainer.resume(tmp_path, sink=sink)
        result = train(resumed)
    # what the checkpoint lacked, and the head of the message it stopped inside: a source batch that ended
    # inside a message (its size follows the loop's pace: linger_s) leaves that message's offset in the
    # checkpoint, so the message (100 events) is read again and the store skips the rows it holds (nothing
    # is learned twice: see below)
    replayed = result.events - (n - saved.learned)
    assert replayed == saved.learned % 100, (result.events, saved.learned)
    reference = TemporalGraphStore()
    reference.ingest(events)
    assert resumed.learned == n and resumed.store.content_hash() == reference.content_hash()
    assert read_latest(tmp_path)[0] == f"ckpt-{resumed.steps:06d}"  # the end is checkpointed too
    assert node_keys(kafka_bootstrap, embeddings) == set(range(60))
