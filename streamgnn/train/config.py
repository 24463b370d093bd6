"""What a training run is: model shape, optimizer, sampling, negatives, windows, checkpoints, serving."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Literal, get_args

from ..configs import Config, Family, from_record
from ..errors import ConfigError
from ..partition import partition_count_problem
from ..sampling.negative import STRATEGIES as NEGATIVE_STRATEGIES
from ..sampling.sampler import STRATEGIES as SAMPLING_STRATEGIES
from ..store.config import check_lateness
from .negatives import POOLS as NEGATIVE_POOLS

# each choice a Literal, checked by the config converter (``configs.Config``) wherever a config is built
QueryTime = Literal["batch", "event"]
ShardMode = Literal["exact", "comm_free"]
Placement = Literal["hash", "stream"]
FollowMode = Literal["every_event", "budget"]
SamplingStrategy = Literal[SAMPLING_STRATEGIES]
NegativeStrategy = Literal[NEGATIVE_STRATEGIES]
NegativePool = Literal[NEGATIVE_POOLS]
QUERY_TIMES, SHARD_MODES, PLACEMENTS, FOLLOW_MODES = map(
    get_args, (QueryTime, ShardMode, Placement, FollowMode)
)


@dataclass(frozen=True)
class ShardConfig(Config):
    """How a sharded run divides the work (``TrainConfig.sharding``).

    ``num_partitions``: graph partitions (keep it fixed across world sizes: a topic with that many
    partitions, spread round-robin over ranks; it must be >= the world size). ``mode``: "exact" (every
    sample and memory row from its owner: the same numbers as one process) or "comm_free" (each rank samples
    only its shard and reads other ranks' memory rows from a halo copy refreshed every ``staleness``
    batches). ``cache_rows``: other ranks' memory rows a rank keeps with their version, so that an
    unchanged row is not sent again (exact mode; 0: no cache). ``placement``: where a vertex's partition
    comes from: "hash" of its id (a topic keyed by hash, as ``streamgnn produce`` writes it) or "stream":
    the events' placement column, as a partition router (``streamgnn partition``, LDG/Fennel) publishes it,
    so that ranks own vertices exactly where the router put them (``num_partitions``: the router's)."""

    num_partitions: int = 8
    mode: ShardMode = "exact"
    staleness: int = 10
    cache_rows: int = 20_000
    placement: Placement = "hash"

    def __post_init__(self) -> None:
        problem = partition_count_problem(self.num_partitions)
        if problem is not None:
            raise ConfigError(problem)
        if not isinstance(self.cache_rows, int) or self.cache_rows < 0:
            raise ConfigError(f"cache_rows must be an int >= 0, got {self.cache_rows!r}")
        if not isinstance(self.staleness, int) or self.staleness < 1:
            raise ConfigError(f"staleness must be an int >= 1 (batches), got {self.staleness!r}")


@dataclass(frozen=True)
class FollowConfig(Config):
    """How the stream loop keeps up with its source (``TrainConfig.follow``; ``train.driver.Budget``).

    Every event always goes through admission, the store, the model's stream state (memory, pair and walk
    state) and the served embeddings of the nodes it touched. What a job may skip is the rest: learning
    steps and the online evaluation (scoring each positive against ``eval_negatives`` candidates).

    ``mode``: "every_event" (default: test-then-train on every event, the benchmarks' protocol) or
    "budget": evaluate a sample of events, ``eval_fraction`` of them (or, with ``eval_per_window`` > 0,
    that many events per ``window_events`` consumed), whole batches of ``batch_size``, once
    ``min_eval_rows`` are due; learn on every batch while the source is caught up (its lag at most
    ``caught_up_events``, 0: one ``batch_size``) or its lag unknown (a file), else on the share of batches
    the measured costs allow: state for every event first, then learning within ``headroom`` of the time the
    arrival rate leaves, so that a lag drains within about ``drain_s`` seconds of the job falling behind.
    Behind, batches grow to an eighth of the lag, up to ``max_batch_size`` (never under ``batch_size``), but
    for one due for evaluation.

    ``min_learn_fraction``: the share of events a job learns from however far behind it is (a floor under
    the budget's share). The budget is measured in wall time, so a loaded host affords less learning: on
    a busy 2-core host the demo learned from 4.7% of its events and fell under EdgeBank's MRR, where a
    fifth of every batch kept it above both EdgeBanks. With a floor the job learns that share anyway and
    drains its lag later, as a Flink job under back-pressure slows its source rather than drop work; the
    run's report says how much later (``FollowReport.floor_s``). 0: freshness first, no floor."""

    mode: FollowMode = "every_event"
    eval_fraction: float = 0.01
    eval_per_window: int = 0
    min_eval_rows: int = 50
    caught_up_events: int = 0
    max_batch_size: int = 1000
    headroom: float = 0.8
    drain_s: float = 30.0
    min_learn_fraction: float = 0.2

    def __post_init__(self) -> None:
        if not 0.0 < self.eval_fraction <= 1.0:
            raise ConfigError(f"eval_fraction must lie in (0, 1], got {self.eval_fraction!r}")
        for name in ("eval_per_window", "caught_up_events"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("min_eval_rows", "max_batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 < self.headroom <= 1.0:
            raise ConfigError(f"headroom must lie in (0, 1], got {self.headroom!r}")
        if not 0.0 <= self.min_learn_fraction <= 1.0:
            raise ConfigError(f"min_learn_fraction must lie in [0, 1], got {self.min_learn_fraction!r}")
        if not self.drain_s > 0:
            raise ConfigError(f"drain_s must be > 0, got {self.drain_s!r}")

    @property
    def budgeted(self) -> bool:
        return self.mode == "budget"


# the model configs a ``TrainConfig`` may hold: each registered with its model (``train.models.register``)
MODEL_CONFIGS = Family("model")
BASELINES = ("edgebank", "edgebank_tw")
DEFAULT_CHECKPOINT_EVERY = 100  # batches: 20,000 events at the default batch size
DEFAULT_CHECKPOINT_MIN_PAUSE_S = 10.0  # seconds: with the default interval, a job behind its source


@dataclass(frozen=True)
class TrainConfig(Config):
    """One run. Defaults follow the TGN paper on JODIE Wikipedia (dims 100, batch 200, 10 recent neighbors,
    Adam 1e-4, one random negative per positive), with the model departures ``TGNConfig`` explains.

    ``model``: a config of a registered model (``MODEL_CONFIGS``, filled by ``train.models.register``),
    picked by its ``variant`` in a config file or a checkpoint's dict: a ``TGNConfig`` (TGN and its tgn,
    jodie and tgat variants; the default, registered first), a ``DyGFormerConfig`` (``variant:
    dygformer``, the sequence model) or a ``TPNetConfig`` (``variant: tpnet``, TPNet's neighbors and walks).
    ``eval_negatives``: fixed negatives each positive is ranked against for MRR (0: no MRR); the first one
    is also the AP/AUC negative. ``eval_strategy``/``train_negatives``: where negatives come from (see
    ``NegativeSampler``). ``train_negative_fraction``: the share of training negatives that
    ``train_negatives`` draws, the rest random (per positive: historical with that probability; a "random"
    strategy draws all at random). All random teaches a pair-feature model that "met before" means positive,
    and it then ranks a historical negative above a new pair; all historical teaches the reverse.
    ``train_negative_pool``: "seen_blank" (default: destinations seen so far, each
    negative blank at the batch's rate of positives to unseen destinations, so that "no history" does not
    read as "positive"; see ``train.negatives``), "seen" (destinations seen so far: the default before, kept
    by checkpoints written before the option), "id_range" (uniform over their integer id range, unseen ids
    as blank nodes, as PyG's loader) or "train_part" (offline only: uniform over the training part's
    destinations, known in advance, those not reached yet as blank nodes, as DyGLib's trainer; ``fit_offline``
    gives them from its split).
    ``window_events``: scored events per running-metrics window.
    ``checkpoint_every``: global batches between checkpoints (0: none; None, the default: every
    ``DEFAULT_CHECKPOINT_EVERY`` batches when a ``checkpoint_dir`` is given, so naming a folder is enough
    for a run to resume; ``checkpoint_interval`` is the resolved figure). ``checkpoint_min_pause_s``: the
    least seconds from one checkpoint's end to the next one by interval, as Flink's
    ``execution.checkpointing.min-pause``: a job behind its source steps batches of thousands of events in
    several steps each, so 100 of them go by in a second or two, and a checkpoint (0.35 s at 20,000
    events/s) every second took a third of the wall (benchmarks/RESULTS.md, "Following: ... a time floor
    on checkpoints"). A checkpoint due is taken at the first boundary after the pause; the run's last one is
    never paused. None (the default): ``DEFAULT_CHECKPOINT_MIN_PAUSE_S`` with the default interval, 0 with
    an interval named (``checkpoint_pause_s`` is the resolved figure). ``serve_every``: batches between
    embedding-table refreshes (0: no table); ``publish_every``: refreshes between sink publishes.

    ``query_time``: when a batch's nodes are embedded. "batch" (default): each distinct node once, as of the
    batch's first event time, like PyG's TGN (memory and graph hold only earlier batches either way, so only
    the neighbors' ages change; 2.2x fewer embeddings on JODIE Wikipedia). "event": each distinct
    (node, event time) once, neighbor ages measured from each event.

    ``sharding``: None (default) trains data-parallel with every rank holding a full replica of the store and
    memory (``streamgnn.train.distributed``, fine while the graph fits one host); a ``ShardConfig`` makes
    each rank own graph partitions instead (``streamgnn.shard``: ``run_online``, ``TrainJob`` and so
    ``streamgnn train`` switch on it). A sharded model reads every pair feature, the walk features included
    (exact mode: each vertex's walk rows live with its owner, ``shard.walks``; communication-free: the walks
    among the events a rank holds, ``shard.pairs``). A sharded DyGFormer reads each vertex's sequence from its
    owner (exact) or from the rank's shard (communication-free; ``shard.sequences``).

    ``baselines``: models scored beside the learned one on the same positives and negatives, each with its
    own metrics (see ``EdgeBank``): "edgebank" (unlimited memory) and "edgebank_tw" (a pair counts if seen
    within ``edgebank_window_ratio`` of the time span seen so far). A learned model that loses to one is
    flagged in the run's result.

    ``follow``: how a live job keeps up with its source (``FollowConfig``): every event updates the state;
    learning and the online evaluation run on every event (default) or on a budget.

    ``allowed_lateness``: how far (in stream time) behind the newest admitted event an event may arrive and
    still be learned; a later one is a dead letter naming how late it was (inf, the default: any order).
    It is the store's ``StoreConfig.allowed_lateness`` (the trainer's own store admits with it; one passed
    in must agree) and the sharded run's index's, and a setting of the run: a resumed one admits with its
    own, whatever the checkpoint's was, as the partition router's ``--allowed-lateness`` does.
    """

    model: Annotated[Config, MODEL_CONFIGS] = field(default_factory=MODEL_CONFIGS.default)
    batch_size: int = 200
    lr: float = 1e-4
    seed: int = 0
    sampling: SamplingStrategy = "recent"
    train_negatives: NegativeStrategy = "random"
    train_negative_fraction: float = 1.0
    train_negative_pool: NegativePool = "seen_blank"
    eval_negatives: int = 100
    eval_strategy: NegativeStrategy = "random"
    query_time: QueryTime = "batch"
    baselines: tuple[str, ...] = ("edgebank", "edgebank_tw")
    edgebank_window_ratio: float = 0.15
    window_events: int = 10_000
    checkpoint_dir: str | None = None
    checkpoint_every: int | None = None
    checkpoint_min_pause_s: float | None = None
    checkpoint_keep: int = 2
    serve_every: int = 1
    publish_every: int = 10
    device: str = "cpu"
    sharding: ShardConfig | None = None
    allowed_lateness: float = math.inf
    follow: FollowConfig = field(default_factory=FollowConfig)

    def __post_init__(self) -> None:
        check_lateness(self.allowed_lateness)
        for name in ("batch_size", "window_events", "checkpoint_keep", "publish_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("eval_negatives", "checkpoint_every", "serve_every"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")
        if not 0.0 <= self.train_negative_fraction <= 1.0:
            raise ConfigError(
                f"train_negative_fraction must lie in [0, 1], got {self.train_negative_fraction!r}"
            )
        if self.train_negatives == "inductive":
            raise ConfigError(
                "train_negatives='inductive' would draw destinations never seen before, but the trainer's "
                "pool is exactly the destinations seen so far: use 'random' or 'historical'"
            )
        if self.train_negative_pool in ("id_range", "train_part") and self.train_negatives != "random":
            raise ConfigError(
                f"train_negative_pool={self.train_negative_pool!r} draws uniformly: "
                "use train_negatives='random'"
            )
        object.__setattr__(self, "baselines", tuple(self.baselines))  # (lists from JSON)
        unknown = sorted(set(self.baselines) - set(BASELINES))
        if unknown or len(set(self.baselines)) != len(self.baselines):
            raise ConfigError(
                f"baselines must be distinct names from {BASELINES}, got {list(self.baselines)}"
            )
        if not self.edgebank_window_ratio > 0:
            raise ConfigError(f"edgebank_window_ratio must be > 0, got {self.edgebank_window_ratio}")
        if self.checkpoint_every and not self.checkpoint_dir:
            raise ConfigError("checkpoint_every > 0 needs a checkpoint_dir")
        pause = self.checkpoint_min_pause_s
        if pause is not None and not (isinstance(pause, (int, float)) and 0.0 <= pause < math.inf):
            raise ConfigError(f"checkpoint_min_pause_s must be a finite number >= 0 or None, got {pause!r}")
        if not isinstance(self.follow, FollowConfig):
            raise ConfigError(f"follow must be a FollowConfig, got {type(self.follow).__name__}")
        if self.sharding is not None and not isinstance(self.sharding, ShardConfig):
            raise ConfigError(f"sharding must be a ShardConfig or None, got {type(self.sharding).__name__}")

    @property
    def checkpoint_interval(self) -> int:
        """Global batches between checkpoints (0: none): ``checkpoint_every``, or its default."""
        if self.checkpoint_every is not None:
            return self.checkpoint_every
        return DEFAULT_CHECKPOINT_EVERY if self.checkpoint_dir else 0

    @property
    def checkpoint_pause_s(self) -> float:
        """Least seconds between checkpoints by interval: ``checkpoint_min_pause_s``, or its default (the
        default interval's pause; an interval a user named is kept as named)."""
        if self.checkpoint_min_pause_s is not None:
            return float(self.checkpoint_min_pause_s)
        return DEFAULT_CHECKPOINT_MIN_PAUSE_S if self.checkpoint_every is None else 0.0

    @classmethod
    def from_checkpoint(cls, data: Mapping, where: str = "") -> TrainConfig:
        """The config a checkpoint was written with (``configs.stamp`` of ``to_dict``'s output), upgraded from
        its version as a complete record (``configs.from_record``): keys written before these options
        existed take the values runs had then, so a run resumes as it was; a config from a file takes
        today's defaults instead."""
        return from_record(cls, data, where)


def model_config(data: Mapping, where: str = "") -> Config:
    """The registered model config a plain dict names by its ``variant`` (none: the default model's)."""
    return MODEL_CONFIGS.from_dict(data, where)
