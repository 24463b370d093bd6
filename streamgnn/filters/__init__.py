"""Graph filters that keep working when links fail: what the agents run (``streamgnn.agents``).

A filter is a polynomial in a shift operator (``shift``) whose every tap is one round of messages between
neighbors; ``exchange`` carries those rounds (locally, or over MPI in ``agents.mpi_exchange``) through a
link-failure model (``failures``), and ``robust`` aggregates what actually arrived (normalized by the
messages received, holding the last one). ``graph_filter`` stacks them into ``GraphNN``. None of this
reads the temporal graph store: it is a model family of its own, beside ``nn``'s temporal models.
"""
