"""Expert parallelism (ep): the experts of each mixture-of-experts layer are split over `ep`
devices, which also hold different sequences (the expert-parallel ranks are data-parallel ranks
for everything but the experts, as in GShard, Lepikhin et al. 2021, and Megatron-Core).

- Split: every other layer's batch dims by ep (like dp); an expert layer's experts X by ep and
  its rows left whole: after the dispatch a device runs its X/ep experts on the tokens that all
  ep devices route to them (the group's b rows x C slots each).
- Memory: the expert weights, gradients and optimizer state follow X (divided by ep); the dense
  weights are replicated over ep.
- Communication per MoE layer and microbatch, on the critical path: an all-to-all that
  dispatches the routed tokens to their experts before the first expert einsum and one that
  combines the results after the last; training runs both again in the backward pass (the
  gradients of combine and dispatch). V = the device's routed token slots x d_model x the
  dtype of the tokens sent (the dispatch dtype, bf16 unless the template's `dispatch_dtype`
  says fp8; the combine and the backward in the block's dtype). Across nodes, the hierarchical
  dispatch (--ep-dispatch hierarchical: DeepEP, HybridEP) sends one copy of a token per
  destination node over the scale-out network (shardline.strategies.ep_dispatch); HybridEP
  (--ep-dispatch hybridep) first all-gathers every rank's routing map over the ep group, once
  per MoE layer and microbatch in the forward pass (the backward reuses it).
- Gradients: the experts' gradients are all-reduced over dp only (expert-data-parallel: the
  devices holding the same experts); the dense weights' gradients also over ep (one all-reduce
  over the ep axis, once per step, overlapped like dp's).
- Mesh: just outside tp (and fsdp), inside dp: the all-to-all rides the scale-up network (NVLink)
  while tp x fsdp x ep fits in a node. docs/moe.md.
"""

from __future__ import annotations

from math import ceil, prod

from shardline.basics.dtypes import dtype_bits
from shardline.basics.options import EP_DISPATCHES, FP8_RECIPES
from shardline.basics.units import parse_count
from shardline.errors import InputError
from shardline.strategies.base import CommTerm, Knob, LayerView, MemorySplit, Network
from shardline.strategies.dp import BatchSplit, batch_degree_ok, split_batch
from shardline.strategies.ep_dispatch import (
    PublishedDispatch,
    hierarchical_a2a_s,
    published_dispatch,
    scale_out_share,
)
from shardline.workload.moe import EXPERT_AXIS, between_kernels
from shardline.workload.workload import Layer, Workload


def experts_of(workload: Workload) -> int | None:
    """The experts of the workload's MoE layers (None: no layer names an experts axis): the
    router's count when the template has one (a decode step's expert einsums hold only the
    experts its batch touches), else the expert einsums' experts dim."""
    if workload.model is not None and workload.model.router_experts:
        return workload.model.router_experts
    for layer in workload.layers:
        dims = layer.axis_dims(EXPERT_AXIS)
        if dims:
            return layer.dims[dims[0]]
    return None


def sm_count(text: str) -> int:
    """--ep-comm-sms: a whole number of SMs, 0 or more (0: the dispatch holds none)."""
    wrong = InputError(f"--ep-comm-sms must be a whole number >= 0, got {text!r}")
    try:
        n = parse_count(text, "--ep-comm-sms")
    except InputError:
        raise wrong from None
    if n < 0:
        raise wrong
    return n


KNOBS = (
    Knob(
        "ep_overlap",
        "--ep-overlap",
        "hide the expert-parallel all-to-alls behind another microbatch's compute",
        switch=True,
    ),
    Knob(
        "ep_dispatch",
        "--ep-dispatch",
        "expert-parallel dispatch: all-to-all (default), hierarchical (DeepEP: one copy per "
        "destination node, at DeepEP's published speed) or hybridep (the same at HybridEP's "
        "published speed, with its all-gather of the routing map before each MoE layer's "
        "dispatch)",
        choices=EP_DISPATCHES,
    ),
    Knob(
        "ep_comm_sms",
        "--ep-comm-sms",
        "SMs the expert-parallel dispatch kernels hold (DeepEP/HybridEP num_sms); with "
        "--ep-overlap the compute beside them runs on the rest (default 0)",
        metavar="N",
        parse=sm_count,
    ),
    Knob(
        "fp8_recipe",
        "--fp8-recipe",
        "Transformer Engine's fp8 scaling recipe of an fp8 run: delayed (default), current, "
        "mxfp8 or blockwise; an eager MoE layer quantizes each local expert's GEMM inputs "
        "apart, 3 kernels an expert under current scaling, 1 under mxfp8 and blockwise, one "
        "fused kernel for all under delayed",
        choices=FP8_RECIPES,
    ),
    Knob(
        "random_routing",
        "--random-routing",
        "the router's logits are random (Megatron-Core's --moe-router-force-load-balancing): "
        "each MoE layer waits for the expert-parallel rank that drew the most tokens",
        switch=True,
    ),
)


def _is_expert(layer: Layer) -> bool:
    return bool(layer.axis_dims(EXPERT_AXIS))


def _ends(layer: Layer) -> tuple[bool, bool]:
    """(dispatch before it, combine after it): an expert layer whose input, or output, has no
    "ffn" dim is where the routed tokens arrive, or leave."""
    ffn = set(layer.axis_dims("ffn"))
    lhs, out = layer.parsed.lhs, layer.output
    return not ffn & set(lhs.dims), not ffn & set(out.dims)


class ExpertParallel(BatchSplit):
    name = "ep"
    word = "ep"
    help = "expert-parallel ranks (mixture-of-experts workloads)"
    splits = ("batch",)
    mesh_rank = 1
    tier = "just outside tp: inside a node (NVLink) while tp x fsdp x ep fits in one"
    comm_where = "all-to-all on the critical path; dense gradients overlapped"
    memory = MemorySplit("dims", "dims", "dims", "dims", "dims")
    optional = True
    knobs = KNOBS

    def valid(self, workload: Workload, degree: int) -> bool:
        if degree == 1:
            return True
        experts = experts_of(workload)
        return experts is not None and experts % degree == 0 and batch_degree_ok(workload, degree)

    def check(self, workload: Workload, degree: int) -> None:
        if degree == 1:
            return
        experts = experts_of(workload)
        if experts is None:
            raise InputError(
                f"ep={degree}: expert parallelism needs a mixture-of-experts workload "
                "(a [transformer] with a moe table, or a zoo MoE model)"
            )
        if experts % degree:
            raise InputError(f"ep={degree} does not divide the {experts} experts")

    def split_dims(
        self, layer: Layer, dims: dict[str, int], degree: int, batch_dim: str | None
    ) -> dict[str, int]:
        if not _is_expert(layer):
            return split_batch(layer, dims, degree, batch_dim)
        # an expert einsum runs the tokens every rank of the group routes to this rank's X/ep
        # experts: the group's rows (not split), its slots as they are, X divided. Splitting the
        # rows by ep and multiplying the slots by ep is the same work when ep divides the rows,
        # and rounds a small decode step's rows (moe.decode_rows) up to one a rank when not.
        out = dict(dims)
        for dim in layer.axis_dims(EXPERT_AXIS):
            out[dim] = ceil(out[dim] / degree)
        return out

    def layer_comm(self, view: LayerView, degree: int, net: Network) -> list[CommTerm]:
        layer = view.layer
        if not _is_expert(layer):
            return self._dense_grads(view, degree, net)
        dispatch, combine = _ends(layer)
        out = []
        last = 2 + len(view.grads)
        calls = (view.count, _scale_out_share(view, degree, net))
        kernel = _published(view, net)
        if dispatch and view.ep_dispatch == "hybridep":
            out.append(self._routing_map(view, degree, net))
        if dispatch:
            v = layer.operand_bytes(layer.parsed.lhs.name, view.dims)
            eight = dtype_bits(layer.dtypes.get(layer.parsed.lhs.name, layer.dtype)) == 8
            out.append(self._a2a(net, degree, calls, v, 0, _kernel_s(kernel, v, "dispatch", eight)))
            if view.training:  # the gradient of the dispatch, after this layer's backward
                g = _act_bytes(layer, view)
                out.append(self._a2a(net, degree, calls, g, last, _kernel_s(kernel, g, "combine")))
        if combine:
            v = layer.operand_bytes(layer.output.name, view.dims)
            eight = dtype_bits(layer.dtypes.get(layer.output.name, layer.dtype)) == 8
            out.append(self._a2a(net, degree, calls, v, 0, _kernel_s(kernel, v, "combine")))
            if view.training:  # the gradient of the combine, before this layer's backward
                t = _kernel_s(kernel, v, "dispatch", eight)
                out.append(self._a2a(net, degree, calls, v, 1, t))
        return out

    def _a2a(
        self,
        net: Network,
        degree: int,
        calls: tuple[int, float],
        local: float,
        step: int,
        published_s: float | None = None,
    ) -> CommTerm:
        """An all-to-all whose every device holds `local` bytes: V = degree x local (the
        collectives' convention: V is the whole array, each device sends (n-1)/n of its part);
        `calls` = (instances, the scale-out share of a hierarchical dispatch, 1: plain);
        `published_s`: the library's published time for it (realistic; never under the bound)."""
        nbytes = local * degree
        count, share = calls
        t, p = (
            net.time("all_to_all", nbytes, self.name),
            net.predicted("all_to_all", nbytes, self.name),
        )
        axis = net.axis_network(self.name)
        if share < 1.0 and axis is not None:
            key = ("ep_hierarchical", nbytes, share, id(axis))
            if key not in net.memo:
                net.memo[key] = hierarchical_a2a_s(axis, nbytes, net.chip, share)
            t, p = net.memo[key] or (t, p)
        if published_s is not None:
            p = max(t, published_s)
        return CommTerm(
            self.name,
            "all_to_all",
            degree,
            count,
            nbytes,
            t,
            critical=True,
            phase="forward" if step == 0 else "backward",
            step=step,
            predicted_s=p,
        )

    def _routing_map(self, view: LayerView, degree: int, net: Network) -> CommTerm:
        """HybridEP's metadata step: before each dispatch every rank all-gathers the routing map
        of the ep group, one byte (a bool) per token and expert (deepseek-ai/DeepEP, hybrid-ep
        `HybridEPBuffer::metadata_preprocessing` -> `Executor::allgather_routing_map`), so
        that each rank knows what it will receive; on the critical path before the dispatch."""
        model = view.model
        experts = model.router_experts if model is not None else 0
        batch_dims = view.layer.axis_dims("batch")
        # the expert einsum holds the group's rows (split_dims); a rank routes 1/ep of them
        batch: float = prod(view.dims[d] for d in batch_dims) / degree
        if model is not None:  # a decode step's expert einsums run rows, not sequences
            batch = batch * model.batch / max(1, prod(view.layer.dims[d] for d in batch_dims))
        q_len = model.q_len if model is not None else 1
        if model is not None and not model.decode:  # context parallelism splits the sequence
            q_len = ceil(q_len / view.degrees.get("cp", 1))
        tokens = batch * q_len
        nbytes = degree * tokens * experts * ROUTING_MAP_BYTES
        return CommTerm(
            self.name,
            "all_gather",
            degree,
            view.count,
            nbytes,
            net.time("all_gather", nbytes, self.name),
            critical=True,
            phase="forward",
            step=0,
            predicted_s=net.predicted("all_gather", nbytes, self.name),
        )

    def _dense_grads(self, view: LayerView, degree: int, net: Network) -> list[CommTerm]:
        """The dense weights' gradients, replicated over ep: one all-reduce over the ep axis of
        each dW (its shard when sharded), once per step, overlapped with the backward pass."""
        if not view.training:
            return []
        out = []
        for i, (grad, gdims) in enumerate(view.grads):
            if grad.grad_of is None:
                continue
            v = view.gradient_bytes(grad, gdims) / view.gradient_ways
            out.append(
                CommTerm(
                    self.name,
                    "all_reduce",
                    degree,
                    view.count,
                    v,
                    net.time("all_reduce", v, self.name),
                    once_per_step=True,
                    phase="backward",
                    step=2 + i,
                    predicted_s=net.predicted("all_reduce", v, self.name),
                )
            )
        return out


ROUTING_MAP_BYTES = 1  # a torch.bool per token and expert


def _published(view: LayerView, net: Network) -> PublishedDispatch | None:
    """DeepEP's or HybridEP's published pricing of this layer's dispatch, where a table applies
    (shardline.collectives.ep_kernels); None for the plain all-to-all or an unpublished case."""
    model, axis = view.model, net.axis_network("ep")
    if model is None or axis is None or not model.router_experts or not model.expert_copies:
        return None
    key = ("ep_published", view.ep_dispatch, view.ep_comm_sms, id(axis))
    if key not in net.memo:
        net.memo[key] = published_dispatch(
            view.ep_dispatch,
            net.chip,
            axis,
            model.router_experts,
            model.expert_copies,
            view.ep_comm_sms,
        )
    return net.memo[key]


def _kernel_s(
    kernel: PublishedDispatch | None, message_bytes: float, op: str, fp8: bool = False
) -> float | None:
    return None if kernel is None else kernel.seconds(message_bytes, op, fp8)


def _scale_out_share(view: LayerView, degree: int, net: Network) -> float:
    """The hierarchical dispatch's scale-out bytes over the plain all-to-all's
    (shardline.strategies.ep_dispatch), 1.0 for the plain dispatch or an axis inside one node."""
    model, axis = view.model, net.axis_network("ep")
    if view.ep_dispatch not in ("hierarchical", "hybridep") or model is None or axis is None:
        return 1.0
    if not model.router_experts or not model.expert_copies:
        return 1.0
    nodes = prod(s.devices for s in axis.stages if s.scale_out)
    if nodes <= 1 or model.router_experts % nodes:
        return 1.0
    return scale_out_share(model.router_experts, model.expert_copies, nodes)


def _act_bytes(layer: Layer, view: LayerView) -> int:
    """The routed tokens' gradient: the dispatched input's elements in the dtype activations
    travel in between kernels (the block's, bf16 under 8-bit training: gradients are not sent
    in fp8 even where the forward dispatch is)."""
    lhs = layer.parsed.lhs
    elements = prod(view.dims[d] for d in lhs.dims)
    return (elements * dtype_bits(between_kernels(layer.dtype)) + 7) // 8


STRATEGY = ExpertParallel()
