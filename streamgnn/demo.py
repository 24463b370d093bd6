"""``streamgnn demo``: the whole product on an embedded default, end to end, in a few minutes.

A local Kafka-compatible broker on a free loopback port; a real dataset replayed into a topic; the topic
consumed into the store; TGN following it online (state for every event; learning and a sampled
evaluation on a budget, ``--follow every_event``: test-then-train on every event) with running AP/MRR;
embeddings published to a compacted topic and read back; a PNG plot and a JSON summary; all stopped cleanly
(with ``--serve``, once Ctrl-C ends the embeddings service that stays up on the broker after the stream).
The store places vertices with Fennel over ``PARTITIONS`` partitions as the events arrive, and the report
gains the partitioning's edge cut and balance over the stream (``partition.png``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import signal
import time
from pathlib import Path

from . import datasets
from .connectors.broker import LocalBroker, in_use
from .connectors.kafka import EventProducer, KafkaSource, create_topic
from .connectors.sink import KafkaSink
from .errors import ConfigError
from .nn import TGNConfig
from .partition import PartitionerConfig, PartitionTimeline
from .serve import ServeConfig
from .store import StoreConfig, TemporalGraphStore
from .train import FollowConfig, OnlineTrainer, TrainConfig
from .train.report import plot_windows, scores_text, write_summary

PARTITIONS = 4


def demo_config(events: int, checkpoint_dir: str | Path, follow: str = "budget") -> TrainConfig:
    """The demo's trainer settings for a run of ``events`` events. ``follow`` "budget" (the default, a live
    job's: state for every event, learning as the lag allows, a sample of the events evaluated;
    ``FollowConfig``) or "every_event" (test-then-train on every event, the benchmarks' protocol: about
    six times as long over the whole replay). The demo's topic is all backlog when it starts, so on a
    budget it learns from the share of its events the host's speed allows within about ``drain_s``: from a
    fifth of the events on, that share of every part of each batch kept the sampled online AP and MRR above
    both EdgeBanks on JODIE Wikipedia and CollegeMsg; a busy host affords less, and there the model falls
    under EdgeBank (benchmarks/CHANGELOG.md, "Following: learning from every part")."""
    mode = FollowConfig(mode=follow)
    scored = events * (mode.eval_fraction if mode.budgeted else 1.0)  # what the online evaluation scores
    return TrainConfig(
        model=TGNConfig(memory_dim=100, time_dim=100, embedding_dim=100, num_neighbors=10),
        checkpoint_dir=str(checkpoint_dir),
        checkpoint_every=200,
        publish_every=20,
        window_events=int(
            max(50 if mode.budgeted else 500, min(10_000, scored // 20))
        ),  # a short run draws a curve
        follow=mode,
    )


def demo_store() -> TemporalGraphStore:
    """The demo's store: vertices placed by Fennel over ``PARTITIONS`` partitions as the events arrive."""
    return TemporalGraphStore(StoreConfig(num_partitions=PARTITIONS, partitioner=PartitionerConfig("fennel")))


def _count_published(bootstrap: str, topic: str) -> int:
    """Distinct node keys in the embeddings topic (all of it, to its end offsets): what a compacted topic
    serves after compaction."""
    from .connectors.kafka import read_topic

    return len({r.key for r in read_topic(bootstrap, topic)})


def run_demo(
    events: int | None,
    out: str,
    dataset: str = "jodie_wikipedia",
    quiet: bool = False,
    config: TrainConfig | None = None,
    serve_port: int | None = None,
) -> int:
    """Run the demo; ``config`` (default: the demo's own) is the trainer's, whose ``checkpoint_dir`` is
    always ``out/checkpoints`` (every demo is a fresh run). With ``serve_port`` (0: any free port), the
    broker and an embeddings service on that port stay up after the stream until Ctrl-C or SIGTERM."""
    _check(dataset, serve_port)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    # Every demo is a fresh run against a fresh broker: an earlier run's checkpoints would not match it.
    shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)
    topic, embeddings_topic = "events", "embeddings"
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        broker = stack.enter_context(LocalBroker())
        stream = _produce(broker.bootstrap, topic, dataset, events)
        create_topic(broker.bootstrap, embeddings_topic, 1, compacted=True)
        sink = stack.enter_context(
            KafkaSink(broker.bootstrap, embeddings_topic=embeddings_topic, fmt="binary")
        )
        ckpt = out_dir / "checkpoints"
        config = (
            dataclasses.replace(config, checkpoint_dir=str(ckpt))
            if config
            else demo_config(len(stream), ckpt)
        )
        trainer = OnlineTrainer(config, demo_store(), sink=sink)
        timeline = PartitionTimeline(every_edges=max(len(stream) // 25, 1))
        source = stack.enter_context(
            KafkaSource(
                topic,
                bootstrap_servers=broker.bootstrap,
                store=trainer.store,
                max_batch_events=max(config.batch_size, config.follow.max_batch_size),
            )
        )
        result = trainer.fit(
            _recording(source.stream(idle_timeout_s=10.0), timeline, trainer),
            positions=source.positions,
            lag=source.lag,
            max_events=events,
            progress=not quiet,
            total=len(stream),
        )
        sink.flush()
        published = _count_published(broker.bootstrap, embeddings_topic)
        summary = _report(result, trainer, timeline, out_dir, dataset, embeddings_topic, published, started)
        if serve_port is not None:
            source.close()  # the stream is done; the broker and the service stay
            _serve(
                stack, broker.bootstrap, embeddings_topic, ckpt, serve_port, stream, summary, out_dir, trainer
            )
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return 0


def _check(dataset: str, serve_port: int | None) -> None:
    """An unknown dataset, or a port the service could not take, fails here: before a broker starts and
    minutes of training."""
    datasets.info(dataset)
    if serve_port is not None:
        ServeConfig(port=serve_port)
        if serve_port and in_use("127.0.0.1", serve_port):
            raise ConfigError(f"port {serve_port} is in use: serve on another (--port, 0: any free one)")


def _produce(bootstrap: str, topic: str, dataset: str, events: int | None):
    """The dataset's events (its first ``events``: a short run replays only what it uses), time-ordered,
    written into ``topic``; returns them."""
    stream = datasets.load(dataset)
    stream = stream[:events] if events is not None else stream
    create_topic(bootstrap, topic, 1)
    with EventProducer(bootstrap, topic, fmt="binary") as producer:
        producer.send(stream)
        producer.flush()
    print(f"broker {bootstrap}: {len(stream):,} {dataset} events in topic '{topic}'", flush=True)
    return stream


def _report(result, trainer, timeline, out_dir: Path, dataset: str, topic: str, published: int, started: float
            ) -> dict:  # fmt: skip
    """Plots, ``summary.json`` and the lines a user reads at the end of the stream; returns the summary."""
    plot = plot_windows(result.windows, out_dir / "metrics.png", result.baseline_windows)
    partitioning = timeline.record(trainer.store, force=True)
    timeline.plot(out_dir / "partition.png", f"{dataset}: Fennel over {PARTITIONS} partitions, as it streams")
    result = dataclasses.replace(result, plot_path=plot, summary_path=out_dir / "summary.json")
    write_summary(result, result.summary_path)
    summary = json.loads((out_dir / "summary.json").read_text())
    summary.update(
        dataset=dataset,
        broker="tansu (local, stopped)",
        nodes_with_published_embeddings=published,
        wall_seconds=time.perf_counter() - started,
        partition={**partitioning.to_dict(), "plot_path": str(out_dir / "partition.png")},
    )
    print(
        f"{result.events:,} events in {result.seconds:.1f}s ({result.events_per_s:,.0f} events/s); "
        f"{scores_text(result)}; arrival->queryable p50 "
        f"{result.latency_p50_ms:.0f} ms, p99 {result.latency_p99_ms:.0f} ms; "
        f"embeddings of {published:,} nodes in topic '{topic}'"
    )
    print(
        f"partitioned as it streamed (Fennel, {PARTITIONS} partitions): edge cut "
        f"{partitioning.edge_cut:.3f}, vertex balance {partitioning.vertex_balance:.2f} (max/mean)"
    )
    print(f"report: {out_dir / 'summary.json'}, {plot}, {out_dir / 'partition.png'}", flush=True)
    return summary


def _serve(stack, bootstrap, topic, ckpt, port, stream, summary, out_dir, trainer) -> None:
    """Serve the published embeddings over HTTP until Ctrl-C or SIGTERM, the broker still up; print curl
    lines that work against it (ids of the stream's first edge) and keep ``summary.json`` truthful. The
    trainer's store (its stream has ended) gives ``/score`` the pair features of a model that reads them."""
    from .foreground import sigterm_as_interrupt
    from .serve import EmbeddingService

    config = ServeConfig(port=port, checkpoint_dir=str(ckpt), log_every_s=0)  # /score: the trained model
    with sigterm_as_interrupt():
        serving = False  # Ctrl-C before the lines below interrupts the demo (the CLI says so, status 130);
        try:  # after them it is how the user stops the service, as they were told
            service = stack.enter_context(EmbeddingService(config, bootstrap, topic, store=trainer.store))
            service.reader.wait_caught_up()  # every published row is served before the lines are printed
            summary.update(broker=f"tansu (local, serving on {bootstrap})", service=service.url)
            (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
            src, dst, url = int(stream.src[0]), int(stream.dst[0]), service.url
            body = f'{{"id": {src}, "k": 5}}'
            serving = True
            print(
                f"serving the embeddings of topic '{topic}' on {url} (broker {bootstrap}); try:\n"
                f"  curl -s '{url}/embeddings?ids={src},{dst}'\n"
                f"  curl -s -X POST {url}/topk -H 'content-type: application/json' -d '{body}'\n"
                f"  curl -s '{url}/score?src={src}&dst={dst}'\n"
                f"  curl -s {url}/health\n"
                "Ctrl-C stops the service and the broker.",
                flush=True,
            )
            signal.pause()
        except KeyboardInterrupt:
            if not serving:
                summary.update(broker="tansu (local, stopped)", service="interrupted before it served")
                (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
                raise
    print("stopping the service and the broker", flush=True)
    summary.update(broker="tansu (local, stopped)", service=f"{service.url} (stopped)")


def _recording(batches, timeline: PartitionTimeline, trainer: OnlineTrainer):
    """``batches`` as they are, with a timeline row each time the trainer's store has grown enough (the
    trainer has ingested a batch by the time it asks for the next)."""
    for batch in batches:
        yield batch
        timeline.record(trainer.store)
