"""Pair features: what they cost per query against the sampler, and what they cost training, on Wikipedia.

python benchmarks/pairs.py [--quick] [--json] [--threads 1] [--events N]   (also: streamgnn bench pairs)

Query cost: the store holds the first ``--events`` events of JODIE Wikipedia (default all, ``--quick``
20%); the queries are what scoring a batch asks: each of the last 2,000 events' sources against its
destination and 100 random destinations, at the event's time (202,000 pairs), with the default model's
settings (``PairFeatures.of(store, TGNConfig())``). Reported per query, median over ``--repeats``: pair
history (``history_us_per_query``: counts, gaps and decayed counts of the pair, and each endpoint's time
since its latest event), co-occurrence of the 20 latest neighbors
(``cooccurrence_us_per_query``), and the sampler's recent-10 hop per root for the same sources
(``sampler_us_per_root``: the neighborhood TGN embeds); ``pair_vs_sampler_cost`` is the pair features'
cost per query over the sampler's per root.

Walk features (``TGNConfig.pair_walks``, TPNet's, part of the default's pair features): the store holds
all but the last 2,000 events and the same 202,000 queries come at those events' times, after
every stored event, as in training; ``walk_us_per_event`` is the first query's replay of the store per
stored event, ``walk_us_per_query`` a query's cost once the state is current (median over ``--repeats``).

Training speed: ``fit_offline`` on the first ``--train-events`` events (default 30,000, ``--quick``
6,000), chronological split by row, the default ``TrainConfig`` (batch 200, dims 100), with
``pair_features`` off, on without walk features (``pair_walks=False``) and as the default model has them,
one epoch each in ``--repeats`` alternating rounds, forwards and backwards in turn (``train_speed``);
``pair_vs_tgn_speed`` is the median over rounds of the default's events/s over TGN alone's in the same
round (the issue's target: at least 0.7), with every round's ratio and the spread beside it, and
``walks_vs_no_walks_speed`` the default's over the one without walks, likewise. A fourth side, the default
plus the time-decayed pair features (``TGNConfig.pair_decayed``): ``decayed_vs_pairs_speed`` (its events/s
over the default's), and ``decayed_us_per_query`` their cost per query on the query-cost store. A fifth,
the default plus the 10 latest neighbors' relative walk products (``TGNConfig.walk_neighbors``):
``relative_vs_tgn_speed`` (its events/s over TGN alone's: the bar ``pair_vs_tgn_speed`` sets for a default)
and ``relative_vs_pairs_speed``.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

try:
    from .common import median_time, report, set_threads
except ImportError:  # run as a script
    from common import median_time, report, set_threads

from streamgnn.cli._args import positive_int
from streamgnn.datasets import load
from streamgnn.nn import TGNConfig
from streamgnn.sampling import SamplerConfig, TemporalSampler
from streamgnn.sampling.decay_pairs import DecayPairs
from streamgnn.sampling.pairs import PairFeatures
from streamgnn.sampling.walks import WalkFeatures
from streamgnn.store import TemporalGraphStore
from streamgnn.train import ChronologicalSplit, TrainConfig, fit_offline

QUERY_EVENTS, CANDIDATES = 2_000, 100


HEADLINE = {
    "history_us_per_query": "pair history, us per query (JODIE Wikipedia, first {events:,} events)",
    "cooccurrence_us_per_query": "neighbor co-occurrence, us per query (same store)",
    "sampler_us_per_root": "the sampler's recent neighbors, us per root (same store, the baseline)",
    "pair_vs_sampler_cost": "a pair's features / a root's neighborhood (cost ratio)",
    "pair_vs_tgn_speed": "training events/s with pair features / TGN alone (first {train_events:,} events)",
    "walk_us_per_query": "walk features, us per query (state current, same queries)",
    "walks_vs_no_walks_speed": "training events/s with walk features / the pair features without them",
    "decayed_us_per_query": "time-decayed pair features, us per query (same store and queries)",
    "decayed_vs_pairs_speed": "training events/s with the decayed pair features / the default without them",
    "relative_vs_tgn_speed": "training events/s with the neighbors' relative walk products / TGN alone",
}


def query_cost(events, repeats: int, seed: int = 0) -> dict:
    store = TemporalGraphStore()
    store.ingest(events)
    last = events.take(slice(len(events) - QUERY_EVENTS, len(events)))
    rng = np.random.default_rng(seed)
    src = store.node_index(last.src)
    cand = np.column_stack(
        [store.node_index(last.dst), rng.choice(store.node_index(events.dst), (len(last), CANDIDATES))]
    )
    q_src, q_dst, q_t = np.repeat(src, cand.shape[1]), cand.reshape(-1), np.repeat(last.t, cand.shape[1])
    pairs = PairFeatures.of(store, TGNConfig())  # what the default model reads
    sampler = TemporalSampler(store, SamplerConfig(fanouts=(10,)))
    for fn in (
        lambda: pairs.history(q_src[:10], q_dst[:10], q_t[:10]),
        lambda: sampler.sample(src[:10], last.t[:10]),
    ):
        fn()  # compile (or load the cached kernels) outside the timing
    history = median_time(lambda: pairs.history(q_src, q_dst, q_t), repeats) / len(q_src)
    cooc = median_time(lambda: pairs.cooccurrence(q_src, q_dst, q_t), repeats) / len(q_src)
    sample = median_time(lambda: sampler.sample(src, last.t), repeats) / len(src)
    decay = DecayPairs.of(TGNConfig())
    decay.read(store, q_src[:10], q_dst[:10], q_t[:10])
    decayed = median_time(lambda: decay.read(store, q_src, q_dst, q_t), repeats) / len(q_src)
    return {
        "queries": len(q_src),
        "history_us_per_query": 1e6 * history,
        "cooccurrence_us_per_query": 1e6 * cooc,
        "sampler_us_per_root": 1e6 * sample,
        "pair_vs_sampler_cost": (history + cooc) / sample,
        "decayed_us_per_query": 1e6 * decayed,
        **walk_cost(events, store.node_index(events.src), store.node_index(events.dst), repeats),
    }


def walk_cost(events, src: np.ndarray, dst: np.ndarray, repeats: int) -> dict:
    """``src``/``dst``: the events' internal ids in a store that holds them all (the same ids here)."""
    store = TemporalGraphStore()
    store.ingest(events.take(slice(0, len(events) - QUERY_EVENTS)))
    q = slice(len(events) - QUERY_EVENTS, len(events))
    q_src, q_t = np.repeat(src[q], 1 + CANDIDATES), np.repeat(events.t[q], 1 + CANDIDATES)
    rng = np.random.default_rng(1)
    q_dst = np.column_stack([dst[q], rng.choice(dst[: q.start], (QUERY_EVENTS, CANDIDATES))]).reshape(-1)
    q_dst = np.where(q_dst < store.num_nodes, q_dst, -1)
    q_src = np.where(q_src < store.num_nodes, q_src, -1)
    config = TGNConfig()
    WalkFeatures(config.walk_hops, config.walk_dim, config.walk_decays).products(
        store, q_src[:1], q_dst[:1], q_t[:1]
    )
    walks = WalkFeatures(config.walk_hops, config.walk_dim, config.walk_decays)
    replay = median_time(
        lambda: (walks.reset(), walks.products(store, q_src[:1], q_dst[:1], q_t[:1])), repeats
    )
    per_query = median_time(lambda: walks.products(store, q_src, q_dst, q_t), repeats) / len(q_src)
    return {"walk_us_per_event": 1e6 * replay / store.num_edges, "walk_us_per_query": 1e6 * per_query}


SIDES = (("tgn", dict(pair_features=False)), ("no_walks", dict(pair_walks=False)), ("pairs", {}))
DECAYED = ("decayed", dict(pair_decayed=True))  # ``bench pairs`` only: the default plus decayed features
RELATIVE = ("relative", dict(walk_neighbors=10))  # ``bench pairs`` only: plus the neighbors' walk products
WARMUP_EVENTS = 1_000


def train_speed(events, repeats: int = 5, sides=SIDES) -> dict:
    """Training events/s of each of ``SIDES`` and the ratios between them, measured to hold on a busy host.

    The sides run in alternating rounds, in turn forwards and backwards (tgn, no_walks, pairs, pairs,
    no_walks, tgn, tgn, ...): ``repeats`` rounds of one ``fit_offline`` epoch each, after an untimed round
    on the first 1,000 events (kernels compile or load). A ratio is taken within each round, between runs
    seconds apart, and ``pair_vs_tgn_speed`` is the median of the rounds' ratios
    (``walks_vs_no_walks_speed`` likewise): load that changes over minutes cancels instead of landing on
    one side, and a load that rises or falls within rounds favours each side in turn. ``*_ratios`` hold
    every round's, ``*_spread`` their min and max; ``train_events_per_s_<side>``: the median over rounds.
    """
    split = ChronologicalSplit.make(events, by_time=False, new_node_fraction=0.0)
    configs = {
        name: TrainConfig(model=TGNConfig(**model), eval_negatives=0, baselines=()) for name, model in sides
    }
    warm = events.take(slice(0, min(WARMUP_EVENTS, len(events))))
    for config in configs.values():
        fit_offline(warm, config, epochs=1, score_val=False)
    rounds, out = [], {}
    for i in range(repeats):
        rates = {}
        for name in list(configs)[:: 1 if i % 2 == 0 else -1]:  # a drifting load favours no side
            result = fit_offline(events, configs[name], epochs=1, split=split, score_val=False)
            rates[name] = result.train_events_per_s[0]
            out.setdefault(f"test_ap_{name}", result.test.ap)
        rounds.append({name: rates[name] for name in configs})
    for name in configs:
        out[f"train_events_per_s_{name}"] = statistics.median(r[name] for r in rounds)
    for key, num, den in (
        ("pair_vs_tgn_speed", "pairs", "tgn"),
        ("walks_vs_no_walks_speed", "pairs", "no_walks"),
        ("decayed_vs_pairs_speed", "decayed", "pairs"),
        ("relative_vs_tgn_speed", "relative", "tgn"),
        ("relative_vs_pairs_speed", "relative", "pairs"),
    ):
        if num not in configs:
            continue
        ratios = [r[num] / r[den] for r in rounds]
        out[key], out[f"{key}_ratios"] = statistics.median(ratios), ratios
        out[f"{key}_spread"] = [min(ratios), max(ratios)]
    out["speed_rounds"] = rounds
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="under a minute: smaller store and training prefix")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--threads", type=positive_int, default=1, help="torch and Numba threads")
    ap.add_argument(
        "--repeats",
        type=positive_int,
        default=5,
        help="timed runs per query kind, and training rounds (median)",
    )
    ap.add_argument("--events", type=positive_int, default=None, help="stream prefix in the store")
    ap.add_argument("--train-events", type=positive_int, default=None, help="stream prefix trained on")
    args = ap.parse_args(argv)
    set_threads(args.threads)
    events = load("jodie_wikipedia")
    n = args.events or (len(events) // 5 if args.quick else len(events))
    n_train = args.train_events or (6_000 if args.quick else 30_000)
    results = {"dataset": "jodie_wikipedia", "events": n, "train_events": n_train, "threads": args.threads}
    results.update(query_cost(events.take(slice(0, n)), args.repeats))
    results.update(train_speed(events.take(slice(0, n_train)), args.repeats, (*SIDES, DECAYED, RELATIVE)))
    report(results, args.json, "pair features: cost per query and training speed", HEADLINE, args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
