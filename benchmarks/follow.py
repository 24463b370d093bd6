"""Follow: does the live job keep up with a topic written at a fixed rate, and what does it deliver then?

python benchmarks/follow.py [--quick] [--json] [--rates 1000,5000,20000,50000] [--seconds S]
    [--reference-events N]
(also: streamgnn bench follow)

An embedded broker (Tansu, as ``streamgnn broker`` and the demo start it); for each rate a fresh topic, a
producer in a child process writing JODIE Wikipedia (replayed end to end, each pass shifted in time, until
the run's ``rate x seconds`` events) as binary messages at that rate, and the default ``streamgnn train``
job (``TrainJob`` with the CLI's defaults: TGN, batches of 200, ``follow.mode="budget"``, the embeddings
published to a topic) following it from the moment it is up. The job runs in this process; every step's
end is recorded (wall clock, events through the trainer), so that:

- ``fresh_ms``: arrival to queryable of every event, from the moment the producer wrote it (event ``i`` at
  ``start + i / rate``) to the end of the step that refreshed its nodes' served rows (p50, p99);
- ``lag``: events written but not yet through the trainer, at every step's end (``max_lag``) and when the
  producer finished (``end_lag``); a rate is *sustained* when ``end_lag`` is under 2 s of its events;
- ``learned_fraction``: the share of events in batches the job learned from; ``ap``/``mrr``: the sampled
  online evaluation's figures with their 95% intervals and sample size, beside both EdgeBanks' on the same
  events.

After the producer finishes the job gets ``DRAIN_S`` seconds to catch up, then it is stopped. The reference
for quality is the same job learning and evaluating on every event (``follow.mode="every_event"``, the
benchmarks' protocol) on the first ``reference_events`` events of the same stream, replayed in process
(its figures do not depend on a rate it keeps up with). Reported: per rate the figures above;
``max_sustained_events_per_s``; ``fresh_p99_ms`` at that rate; ``ap_at_max_vs_every_event`` (sampled AP at
the max sustained rate less the reference's AP). Before the first rate the job's paths are stepped once
in the process (``warm``: Numba's kernels loaded or compiled, torch's first steps), so that every rate
measures a job in its steady state; ``warmup_s`` says what that start cost. The machine is shared: the
load average is recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import threading
import time

import numpy as np

try:
    from .common import report, set_threads
except ImportError:  # run as a script
    from common import report, set_threads

DATASET = "jodie_wikipedia"
DRAIN_S = 3.0  # seconds the job may take to catch up after the producer finished
SUSTAINED_S = 2.0  # a rate is sustained when the lag at its end is under this many seconds of its events
MESSAGE_EVENTS = 200  # events per binary message the producer writes


def replayed_stream(events: int):
    """JODIE Wikipedia end to end until ``events`` events, each pass after the last (times, ids moved on)."""
    from streamgnn.datasets import load
    from streamgnn.events import EventBatch, concat

    base = load(DATASET)
    span = float(base.t[-1] - base.t[0]) + 1.0
    parts, n = [], 0
    for k in range(math.ceil(events / len(base))):
        part = base[: min(len(base), events - n)]
        parts.append(
            EventBatch.from_columns(
                src=part.src, dst=part.dst, t=part.t + k * span, eid=part.eid + k * len(base),
                features=part.features,
            )
        )  # fmt: skip
        n += len(part)
    return concat(parts)


def produce(bootstrap: str, topic: str, events: int, rate: float) -> None:
    """The child process: print the wall-clock start, then write the stream at ``rate``."""
    from streamgnn.connectors.kafka import produce_dataset

    stream = replayed_stream(events)
    print(json.dumps({"start": time.time()}), flush=True)
    produce_dataset(bootstrap, topic, stream, 1, rate=rate, fmt="binary", batch_size=MESSAGE_EVENTS)


class _Stop(Exception):
    """Raised from the job's step hook once the run's time is up (the job has no other stop)."""


def follow_rate(bootstrap: str, rate: float, seconds: float) -> dict:
    """One rate: a fresh topic, the producer, the default job; the figures of the module docstring."""
    from streamgnn.connectors.kafka import create_topic
    from streamgnn.jobs import TrainJob
    from streamgnn.train import FollowConfig, TrainConfig

    events = int(rate * seconds)
    topic, out_topic = f"follow-{int(rate)}", f"follow-{int(rate)}-embeddings"
    create_topic(bootstrap, topic, 1)
    create_topic(bootstrap, out_topic, 1, compacted=True)
    job = TrainJob(
        TrainConfig(follow=FollowConfig(mode="budget")), topic=topic, bootstrap=bootstrap,
        embeddings_topic=out_topic, log_every_s=0,
    )  # fmt: skip
    ends: list[tuple[float, int]] = []  # (wall clock, events through the trainer) at each step's end
    run = {"start": None, "stop_at": None, "produced_at": None}

    def producer() -> None:
        while job.trainer is None:  # the job is up (its model built, its source about to poll)
            time.sleep(0.05)
        child = subprocess.Popen(
            [sys.executable, __file__, "--produce", bootstrap, topic, str(events), str(rate)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        run["start"] = json.loads(child.stdout.readline())["start"]
        child.wait()
        run["produced_at"] = time.time()
        run["stop_at"] = run["produced_at"] + DRAIN_S

    def done() -> bool:
        through = ends[-1][1] if ends else 0
        return run["stop_at"] is not None and (through >= events or time.time() > run["stop_at"])

    def on_step(batch, result, arrival) -> None:
        monitor(batch, result, arrival)
        ends.append((time.time(), (ends[-1][1] if ends else 0) + len(batch)))
        if done():
            raise _Stop

    def stream(trainer, idle_timeout_s):
        """The job's stream, its quiet heartbeats (the job's publish first) ending the run as well: a job
        that caught up before the producer's end was seen takes no step that could end it."""
        source, kafka = stream_of(trainer, idle_timeout_s)
        publish = source.on_idle

        def on_idle() -> None:
            publish()
            if done():
                raise _Stop

        source.on_idle = on_idle
        return source, kafka

    thread = threading.Thread(target=producer, daemon=True)
    monitor, stream_of = job._on_step, job._stream
    job._on_step, job._stream = on_step, stream  # the job's own monitoring and stream, then ours
    thread.start()
    with contextlib.suppress(_Stop):
        job.run(idle_timeout_s=60, progress=False)
    thread.join()
    return figures(job.trainer.budget.report(), ends, run, events, rate)


def figures(follow, ends, run, events: int, rate: float) -> dict:
    """One rate's figures from the steps' ends and the producer's schedule."""
    at = np.array([e[0] for e in ends]) - run["start"]
    through = np.array([e[1] for e in ends])
    produced = np.minimum(events, np.maximum(0.0, at) * rate)
    lag = produced - through
    end = np.searchsorted(at, run["produced_at"] - run["start"])  # the first step after the producer ended
    end_lag = float(lag[min(end, len(lag) - 1)]) if len(lag) else math.nan
    # each event's step: the first whose running count passes it; events it never reached are left out
    done = int(through[-1]) if len(through) else 0
    i = np.arange(min(done, events))
    step = np.searchsorted(through, i, side="right")
    fresh = 1e3 * (at[step] - i / rate)
    out = {
        "rate": rate, "events": events, "consumed": done, "seconds": events / rate,
        "end_lag": end_lag, "end_lag_s": end_lag / rate, "max_lag": float(lag.max(initial=0)),
        "sustained": bool(end_lag < SUSTAINED_S * rate),
        "fresh_p50_ms": float(np.percentile(fresh, 50)) if len(fresh) else math.nan,
        "fresh_p99_ms": float(np.percentile(fresh, 99)) if len(fresh) else math.nan,
        "learned_fraction": follow.learned_fraction, "evaluated": follow.evaluated_events,
    }  # fmt: skip
    for name, figs in follow.figures.items():
        for metric, est in figs.items():
            key = metric if name == "model" else f"{name}_{metric}"
            out[key], out[f"{key}_low"], out[f"{key}_high"] = est["value"], est["low"], est["high"]
    return out


def reference(events: int) -> dict:
    """The same job learning and evaluating on every event, replayed in process (no broker, no rate)."""
    from streamgnn.train import OnlineTrainer, TrainConfig

    stream = replayed_stream(events)
    trainer = OnlineTrainer(TrainConfig())  # follow.mode="every_event": test-then-train on every event
    result = trainer.fit(stream.split(10_000), progress=False)
    model = result.follow.figures["model"]
    return {
        "events": events, "events_per_s": result.events_per_s, "ap": model["ap"]["value"],
        "ap_low": model["ap"]["low"], "ap_high": model["ap"]["high"], "mrr": model["mrr"]["value"],
        "edgebank_ap": result.follow.figures["edgebank"]["ap"]["value"],
    }  # fmt: skip


def warm() -> float:
    """Step the job's paths once in this process, on a stream of their own, before the first rate: the first
    call of each Numba kernel loads it from its cache (or, after a kernel's source changed, compiles it:
    about 33 CPU s on the 2-core host) and torch's first steps set up, which the first rate's freshness and
    lag would otherwise count (a job is started once, then follows its topic). Returns the seconds taken,
    reported as ``warmup_s``: what a job's first steps cost on top of steady state."""
    from streamgnn.train import FollowConfig, OnlineTrainer, TrainConfig

    began = time.perf_counter()
    stream = replayed_stream(1000)
    trainer = OnlineTrainer(TrainConfig(follow=FollowConfig(mode="budget")))
    paths = [(True, False), (True, False), (True, True), (False, False), (False, True)]  # (learn, score)
    for lo, (learn, score) in zip(range(0, len(stream), 200), paths, strict=True):
        trainer.step(stream[lo : lo + 200], arrival=time.perf_counter(), train=learn, score=score)
    return time.perf_counter() - began


def follow(rates: list[float], seconds: float, reference_events: int) -> dict:
    from streamgnn.connectors.broker import LocalBroker

    load_before = os.getloadavg()
    warmup_s = warm()
    with LocalBroker() as broker:
        runs = [follow_rate(broker.bootstrap, rate, seconds) for rate in rates]
    ref = reference(reference_events) if reference_events else None
    sustained = [r for r in runs if r["sustained"]]
    best = max(sustained, key=lambda r: r["rate"]) if sustained else None
    edgebanks = max(best["edgebank_ap"], best["edgebank_tw_ap"]) if best else math.nan
    return {
        "dataset": DATASET, "rates": rates, "seconds_per_rate": seconds, "runs": runs,
        "max_sustained_events_per_s": best["rate"] if best else 0.0,
        "fresh_p50_ms": best["fresh_p50_ms"] if best else math.nan,
        "fresh_p99_ms": best["fresh_p99_ms"] if best else math.nan,
        "learned_fraction_at_max": best["learned_fraction"] if best else math.nan,
        "ap_at_max": best["ap"] if best else math.nan,
        "ap_at_max_vs_every_event": best["ap"] - ref["ap"] if best and ref else math.nan,
        "above_edgebanks_at_max": bool(best and best["ap"] > edgebanks),
        "every_event": ref, "warmup_s": warmup_s, "load_avg_before": load_before[0],
        "load_avg_after": os.getloadavg()[0],
    }  # fmt: skip


HEADLINE = {
    "max_sustained_events_per_s": "highest rate whose lag stays under 2 s of its events (events/s)",
    "fresh_p99_ms": "arrival to queryable p99 at that rate, ms",
    "learned_fraction_at_max": "share of events learned from at that rate",
    "ap_at_max": "sampled online AP at that rate",
    "ap_at_max_vs_every_event": "... less the AP of the job learning on every event",
    "load_avg_before": "load average (1 min) before the run",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="rates 2,000 and 10,000 for 4 s each")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--rates", help="events/s, comma separated (default 1000,5000,20000,50000)")
    ap.add_argument("--seconds", type=float, help="seconds of production per rate (default 20; --quick 4)")
    ap.add_argument(
        "--reference-events", type=int,
        help="events of the every-event reference (default 50,000; --quick 5,000; 0: none, for A/B runs of "
        "the live job alone: ap_at_max_vs_every_event is then NaN and every_event null)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    rates = [
        float(r) for r in (args.rates or ("2000,10000" if args.quick else "1000,5000,20000,50000")).split(",")
    ]
    seconds = args.seconds or (4.0 if args.quick else 20.0)
    reference_events = 5_000 if args.quick else 50_000
    reference_events = reference_events if args.reference_events is None else args.reference_events
    if not rates or min(rates) <= 0 or seconds <= 0 or reference_events < 0:
        ap.error("--rates must be positive events/s, --seconds > 0 and --reference-events >= 0")
    set_threads(1)  # as `streamgnn train` (--threads 1)
    results = follow(rates, seconds, reference_events)
    if not args.json:
        for run in results["runs"]:
            print(
                f"{run['rate']:>8,.0f} ev/s: end lag {run['end_lag']:>9,.0f} (max {run['max_lag']:,.0f}), "
                f"fresh p50 {run['fresh_p50_ms']:,.0f} ms p99 {run['fresh_p99_ms']:,.0f} ms, learned "
                f"{run['learned_fraction']:.0%}, AP {run.get('ap', math.nan):.4f} (n={run['evaluated']:,}) "
                f"EdgeBank {run.get('edgebank_ap', math.nan):.4f} / {run.get('edgebank_tw_ap', math.nan):.4f}"
            )
    report(results, args.json, f"follow: {DATASET} through a topic at fixed rates", HEADLINE, args.quick)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--produce"]:
        produce(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
    else:
        raise SystemExit(main())
