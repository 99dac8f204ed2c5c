"""The node agent's protocol as the head speaks it: one call over a node's transport, its answer
read, and the operations on one node of a run."""
