"""Decentralized training: every agent learns its own copy of the network from messages only.

python examples/agents_decentralized.py [--steps N]            (all agents in this process)
mpiexec -n 4 python examples/agents_decentralized.py           (agents spread over 4 ranks)

Each step every agent runs the network forward and backward over lossy links (10% fail at random), takes an
Adam step along its gossiped estimate of the average gradient, and mixes its parameters with its neighbors,
once with full-precision messages and once with 8-bit quantized ones (error feedback): about the same
accuracy for a quarter of the bytes.
"""

import argparse
import os

import torch

from streamgnn.agents.dsgd import DecentralizedConfig, DecentralizedTrainer
from streamgnn.agents.runtime import LocalAgents, MPIAgents
from streamgnn.agents.source_loc import SourceLocalization, SourceLocConfig
from streamgnn.filters.failures import Bernoulli
from streamgnn.filters.graph_filter import GraphNN, GraphNNConfig
from streamgnn.filters.robust import Aggregation


def main(steps: int) -> None:
    torch.set_num_threads(1)
    task = SourceLocalization(SourceLocConfig(nodes=40, communities=4, train=800, test=100))
    agents = MPIAgents(task.config.nodes) if "PMI_SIZE" in os.environ else LocalAgents(task.config.nodes)
    for codec in ("none", "quant:8"):
        torch.manual_seed(0)  # every agent starts from the same weights
        model = GraphNN(
            GraphNNConfig((task.num_features, 16, task.num_classes), 4, Aggregation(normalize=True))
        )
        exchange = agents.exchange(Bernoulli(0.1, seed=1), exact=False)
        trainer = DecentralizedTrainer(
            model, task, exchange, DecentralizedConfig(steps=steps, compression=codec)
        )
        trainer.train(desc=f"{codec} (rank {agents.rank})" if agents.is_root else None)
        correct, total = trainer.correct_counts(agents.exchange())
        sums = agents.total([correct, total, trainer.mixing_bytes])
        if agents.is_root:
            print(
                f"mixing messages {codec:>8}: accuracy {sums[0] / sums[1]:.3f}, {sums[2] / 1e6:.1f} MB sent"
            )
    agents.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    main(ap.parse_args().steps)
