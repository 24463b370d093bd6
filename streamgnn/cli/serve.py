"""``streamgnn serve``: the embeddings service (HTTP + /metrics) over the compacted embeddings topic."""

from __future__ import annotations

import argparse

from ._args import port_or_any, seconds
from ._flags import add_config_option, override

HELP = "serve node embeddings over HTTP (lookups, top-k, link scores, /metrics)"

EXAMPLE = """example:
  streamgnn serve --bootstrap localhost:9092 --topic embeddings --port 8000
  curl 'localhost:8000/embeddings?ids=1,2'
  curl -X POST localhost:8000/topk -d '{"id": 1, "k": 5}'
  streamgnn serve --config cluster.yaml   # kafka.*, serve.*, and train.checkpoint_dir for /score
  STREAMGNN_SERVE__API_KEY=$(cat key) streamgnn serve ... --ssl-certfile cert.pem --ssl-keyfile key.pem
"""


def _run(args: argparse.Namespace, rest: list[str]) -> int:
    import dataclasses

    from ..serve.service import EmbeddingService
    from ._config import config_from_args

    cfg = config_from_args(args)
    serve = cfg.serve
    if serve.checkpoint_dir is None and cfg.train.checkpoint_dir:  # the trainer's, from the same file
        serve = dataclasses.replace(serve, checkpoint_dir=cfg.train.checkpoint_dir)
    cfg.kafka.check_reachable()
    EmbeddingService(serve, cfg.kafka.bootstrap, cfg.kafka.embeddings_topic).run()
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "serve",
        help=HELP,
        description="Read the compacted embeddings topic (what `streamgnn train` publishes) from its start "
        "into a table and answer over HTTP: GET/POST /embeddings, /topk, /score, /health, /metrics.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_option(p, "kafka, serve, train (checkpoint_dir)")
    override(p, "--bootstrap", key="kafka.bootstrap", metavar="HOST:PORT", help="Kafka, e.g. localhost:9092")
    override(p, "--topic", key="kafka.embeddings_topic", help="the embeddings topic, e.g. embeddings")
    override(p, "--host", key="serve.host", help="address to listen on, e.g. 0.0.0.0")
    override(
        p, "--port", key="serve.port", type=port_or_any, help="port to listen on, e.g. 8000 (0: any free one)"
    )
    override(p, "--metric", key="serve.metric", choices=("cosine", "dot"), help="default /topk similarity")
    override(
        p, "--topk", key="serve.topk", choices=("approximate", "exact"),
        help="cosine /topk from an index kept as rows change, from 100k rows (approximate) or a "
        "scan of every row (exact)",
    )  # fmt: skip
    override(p, "--node-ids", key="serve.node_ids", choices=("int", "str"), help="node id type")
    override(
        p, "--checkpoint-dir", key="serve.checkpoint_dir", metavar="DIR",
        help="the trainer's checkpoints: /score uses its link predictor (else cosine), e.g. out/ckpt",
    )  # fmt: skip
    override(
        p, "--ssl-certfile", key="serve.ssl_certfile", metavar="PEM", help="serve HTTPS with this certificate"
    )
    override(p, "--ssl-keyfile", key="serve.ssl_keyfile", metavar="PEM", help="the certificate's private key")
    override(
        p, "--log-every", key="serve.log_every_s", type=seconds, metavar="S", help="seconds per log line"
    )
    p.set_defaults(func=_run)
