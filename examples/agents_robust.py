"""Train a graph network to survive link failures and compare it with a plain one, all in one process.

python examples/agents_robust.py [--steps N]

Source localization on a stochastic block model: every agent names the community a diffused rumor started in,
from messages exchanged with its neighbors only. The plain network is trained on the intact graph; the robust
one with random edge sampling (each link kept with probability 0.7 at every shift) and an aggregation that
normalizes by the messages actually received. Both then run while links fail at random.
"""

import argparse

import torch

from streamgnn.agents.experiments import node_cross_entropy, source_loc_batches
from streamgnn.agents.fit import FitConfig, fit
from streamgnn.agents.source_loc import SourceLocalization, SourceLocConfig, correct_counts
from streamgnn.filters.exchange import LocalExchange
from streamgnn.filters.failures import Bernoulli
from streamgnn.filters.graph_filter import GraphNN, GraphNNConfig
from streamgnn.filters.robust import Aggregation


def main(steps: int) -> None:
    torch.set_num_threads(1)
    task = SourceLocalization(SourceLocConfig(nodes=40, communities=4, train=1500, test=200))
    models = {}
    for name, keep, aggregation in [
        ("plain", 1.0, Aggregation()),
        ("robust", 0.7, Aggregation(normalize=True)),
    ]:
        torch.manual_seed(0)
        model = GraphNN(
            GraphNNConfig((task.num_features, 16, task.num_classes), taps=4, aggregation=aggregation)
        )
        fit(model, source_loc_batches(task), node_cross_entropy, FitConfig(steps=steps, keep=keep), desc=name)
        models[name] = model
    print("link failure probability:    0.0    0.3    0.5")
    for name, model in models.items():
        accs = []
        for p in (0.0, 0.3, 0.5):
            correct, total = correct_counts(model, task, LocalExchange(Bernoulli(p, seed=1), per_lane=True))
            accs.append(correct / total)
        print(f"{name:<26}" + "".join(f"{a:7.3f}" for a in accs))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=600, help="training steps per network (default 600)")
    main(ap.parse_args().steps)
