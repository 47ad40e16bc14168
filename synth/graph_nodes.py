"""The CUDA-graph node fields of a replayed kernel event, as recent PyTorch writes them.

Kineto (CUDA >= 12) adds CUPTI's `graph id` and `graph node id` to every kernel, memcpy and memset event's
args (0 when the activity did not come from a graph). When the graph was captured under
`torch.cuda.graph(..., enable_annotations=True)` and the trace exported with its annotations, PyTorch
bakes each `mark_kernels` annotation of a node into the args of that node's events, every value as text:
a module FQN under the annotation's own key (torchtitan tags `module_fqn`), and for a collective the
`record_param_comms` fields c10d's graph-annotation hooks record (`Collective name`, `Process Group Name`,
`In msg nelems`, ...), since a replayed NCCL kernel has no CPU op to copy them from.

The synthesizer's decode graph is the only graph of its process: graph id 1, and its nodes numbered in the
order the capture created them (the body's launch order) in the low 32 bits under the graph id, the shape of
the tools ids `mark_kernels` keys its annotations by.
"""

from __future__ import annotations

from .sim_types import Act

GRAPH_ID = 1
ANNOTATION = "decode"

# the fields of a collective's annotation (torch.distributed's graph-annotation hooks record these)
COLLECTIVE_FIELDS = (
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "Process Group Name",
    "Process Group Description",
    "Process Group Ranks",
    "dtype",
)


def node_id(index: int) -> int:
    """The graph node id of the index-th node of the decode graph."""
    return (GRAPH_ID << 32) | index


def graph_node_args(act: Act, collective: dict | None) -> dict:
    """The args a replayed activity's event gains: its node identity and its node's annotation.
    collective: the record_param_comms fields of the collective it runs (None: not a collective)."""
    args: dict = {"graph id": GRAPH_ID, "graph node id": node_id(act.graph_node or 0)}
    # the engine's own mark_kernels("decode") around the captured forward: a string annotation is `name`
    args["name"] = ANNOTATION
    if act.fqn:
        args["module_fqn"] = act.fqn
    if collective:
        args.update({key: str(collective[key]) for key in COLLECTIVE_FIELDS if key in collective})
    return args


def node_truth(acts: list[Act]) -> list[list]:
    """Per activity (in the order given): [graph node id, annotated module FQN, annotated collective], each
    None where the activity was not replayed from the graph (the truth of ground_truth.json's `graph_nodes`)."""
    out = []
    for a in acts:
        if a.graph_node is None:
            out.append([None, None, None])
        else:
            out.append([node_id(a.graph_node), a.fqn, a.k.collective if a.k and a.k.collective else None])
    return out
