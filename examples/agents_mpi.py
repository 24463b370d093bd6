"""Run a trained graph network as agents on MPI ranks and check it against the one-process computation.

mpiexec -n 4 python examples/agents_mpi.py [--steps N] [--failures P]

Rank 0 trains a small network and hands it to every rank; each rank then hosts a block of the agents, and
every round each agent exchanges messages with its current neighbors only (point-to-point, links failing at
random under a seeded model every rank evaluates alike). Rank 0 then recomputes everything in one process
under the same seeded failures and compares: the agents' outputs are the same numbers."""

import argparse

import torch

from streamgnn.agents.experiments import node_cross_entropy, source_loc_batches
from streamgnn.agents.fit import FitConfig, fit
from streamgnn.agents.runtime import MPIAgents
from streamgnn.agents.source_loc import SourceLocalization, SourceLocConfig
from streamgnn.filters.exchange import LocalExchange
from streamgnn.filters.failures import Bernoulli
from streamgnn.filters.graph_filter import GraphNN, GraphNNConfig
from streamgnn.filters.robust import Aggregation


def main(steps: int, p: float) -> None:
    torch.set_num_threads(1)  # one thread per rank
    task = SourceLocalization(SourceLocConfig(nodes=40, communities=4, train=800, test=64))
    agents = MPIAgents(task.config.nodes)

    def train() -> GraphNN:
        config = GraphNNConfig((task.num_features, 16, task.num_classes), 4, Aggregation(normalize=True))
        model = GraphNN(config)
        fit(model, source_loc_batches(task), node_cross_entropy, FitConfig(steps=steps, keep=0.7))
        return model

    model = agents.share(train)  # rank 0 trains, every rank gets the weights
    x = task.features(task.x_test, agents.nodes)  # each rank only holds its own agents' readings
    exchange = agents.exchange(Bernoulli(p, seed=7), per_lane=True)
    exchange.begin_step(task.shift)
    with torch.no_grad():
        logits = model(x, exchange)  # [signals, this rank's agents, classes]
    correct = (logits.argmax(-1) == task.y_test[:, None]).sum().item()
    total = agents.total([correct, logits.shape[0] * logits.shape[1]])
    everyone = agents.all_rows(logits)
    if agents.is_root:
        central = LocalExchange(Bernoulli(p, seed=7), per_lane=True)
        central.begin_step(task.shift)
        with torch.no_grad():
            same = torch.equal(everyone, model(task.features(task.x_test), central))
        print(
            f"{agents.size} ranks, {task.config.nodes} agents, link failures {p:g}: accuracy "
            f"{total[0] / total[1]:.3f}, equal to the one-process run: {same}"
        )
    agents.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=400, help="training steps on rank 0 (default 400)")
    ap.add_argument("--failures", type=float, default=0.3, help="link failure probability (default 0.3)")
    args = ap.parse_args()
    main(args.steps, args.failures)
