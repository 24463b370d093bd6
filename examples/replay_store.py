"""Replay a bundled real dataset into the store, ask it time-travel questions, checkpoint and restore it.

python examples/replay_store.py [dataset]
"""

import sys
import tempfile

from streamgnn import datasets
from streamgnn.store import StoreConfig, TemporalGraphStore


def main(name: str = "collegemsg") -> None:
    stream = datasets.load(name)
    store = TemporalGraphStore(StoreConfig(num_partitions=4))
    for batch in stream.split(1000):
        report = store.ingest(batch)
        for letter in report.dead_letters:
            print("dead letter:", letter.reason)
    print(
        f"{name}: {store.num_nodes:,} nodes, {store.num_edges:,} edges, partitions {store.partition_sizes()}"
    )
    t_mid = float(stream.t[len(stream) // 2])
    hub = stream.src[0]
    print(f"node {hub} had {len(store.neighbors(hub, t=t_mid))} edges by t={t_mid:.0f}")
    snap = store.to_pyg(store.snapshot(t_mid))
    print("snapshot at mid-stream as PyG:", snap)
    with tempfile.TemporaryDirectory() as tmp:
        store.save(tmp)
        restored = TemporalGraphStore.load(tmp)
        print("restored equals original:", restored.content_hash() == store.content_hash())


if __name__ == "__main__":
    main(*sys.argv[1:])
