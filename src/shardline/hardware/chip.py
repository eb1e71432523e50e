"""A chip as typed data: peaks, memory, on-chip levels, interconnect, achievable figures.

Every number keeps its source (`Chip.sources`, keyed by the dotted TOML path). Units are SI and in
the field names. Loading and validation live in `catalog.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from shardline.basics.dtypes import canonical_dtype
from shardline.basics.kinds import (
    HOST_CPUS,
    ChipKind,
    ChipTopology,
    CollectiveLibrary,
    HostCpu,
    ScaleOutFabric,
    Wraparound,
)
from shardline.errors import InputError

__all__ = ["Chip", "OnChip", "Interconnect", "ScaleOut", "Achievable", "ASSUMED", "host_cpu_word"]


def host_cpu_word(word: object, where: str) -> HostCpu | None:
    """A node's CPU vendor word (kinds.HOST_CPUS) or None; anything else is an InputError."""
    if word is None or word in HOST_CPUS:
        return word
    raise InputError(f"{where} must be one of {', '.join(HOST_CPUS)}, got {word!r}")


# How `Chip.sources` marks a field the chip file left out and the loader filled with a default.
ASSUMED = "assumed default: "


@dataclass(frozen=True)
class OnChip:
    core_name: str = "core"
    cores: int | None = None
    shared_bytes_per_core: float | None = None
    l2_bytes: float | None = None
    l2_bytes_per_s: float | None = None
    shared_bytes_per_s: float | None = None
    clock_hz: float | None = None
    align_bytes: int | None = None
    matrix_unit_elements: int | None = None
    # the rest of the core (SM, CU, TensorCore): its vector ALUs (fp32 CUDA cores per SM, VPU ALUs
    # per TensorCore), its matrix units (Tensor Cores per SM, MXUs per TensorCore), the combined
    # L1/shared-memory array and the register file
    vector_lanes_per_core: int | None = None
    tensor_cores_per_core: int | None = None
    l1_bytes_per_core: float | None = None
    registers_bytes_per_core: float | None = None
    # the GEMM library's kernels are persistent and overlap a tile's epilogue (and the next tile's
    # loads) with another tile's math (CUTLASS warp-specialized ping-pong, Hopper and later)
    gemm_epilogue_overlapped: bool | None = None
    # the GEMM library runs a matrix-vector product (M or N = 1) with its tiled GEMM kernels, not
    # a streaming gemv kernel, so it pays the tiled kernel's floor (AMD's aiter / hipBLASLt)
    matrix_vector_tiled: bool | None = None
    # the aggregate rate at which a GEMM's tiles load their operand panels, where it is not the
    # L2's: a chip whose L2 is split among dies that workgroups are dispatched to round-robin
    # (AMD's XCDs) feeds the tiles from its memory-side cache (docs/prediction.md, "Tile feed")
    tile_feed_bytes_per_s: float | None = None
    # the rate at which kernels read data already resident in the L2 (a warm L2: a benchmark that
    # replays one kernel on the same buffers), where the file keeps it apart from `l2_bytes_per_s`
    # because the L2 does not feed the GEMM tiles at that rate (Blackwell's paired-SM MMA kernels)
    l2_read_bytes_per_s: float | None = None
    # the largest working set the L2 holds at that rate (where a replayed read's plateau ends: less
    # than l2_bytes, as the L2 is split in partitions that duplicate data); absent: l2_bytes
    l2_resident_bytes: float | None = None

    @property
    def feed_bytes_per_s(self) -> float | None:
        """The rate that feeds a GEMM's tiles: `tile_feed_bytes_per_s`, else the L2's."""
        return self.tile_feed_bytes_per_s or self.l2_bytes_per_s

    @property
    def resident_read_bytes_per_s(self) -> float | None:
        """The rate of reading L2-resident data: `l2_read_bytes_per_s`, else the L2's."""
        return self.l2_read_bytes_per_s or self.l2_bytes_per_s


@dataclass(frozen=True)
class ScaleOut:
    """The network between nodes. `bytes_per_s_per_device` is each device's one-way share of its
    node's NICs (nics_per_node x nic_bytes_per_s / devices_per_node where those are given)."""

    link: str
    bytes_per_s_per_device: float
    hop_latency_s: float
    fabric: ScaleOutFabric = "unknown"
    nics_per_node: int | None = None
    nic_bytes_per_s: float | None = None  # one NIC, one way
    devices_per_node: int | None = None  # accelerators that share the node's NICs
    # achievable fraction of the NIC line rate for large collectives (Simple protocol busbw)
    efficiency: float | None = None
    in_network_reduction: bool = False  # SHARP / CollNet in the switches
    # the shortest collective across nodes on this fabric (nccl-tests' smallest all-reduce):
    # launch, proxy threads and the transport's round trips, whatever the size
    collective_latency_s: float | None = None
    host_cpu: HostCpu | None = None  # the nodes' CPU vendor (None: not known)
    # leaf/spine: beyond `nodes_per_leaf` nodes traffic crosses the spine at 1/oversubscription
    oversubscription: float = 1.0
    nodes_per_leaf: int | None = None

    @property
    def node_bytes_per_s(self) -> float:
        """One-way bytes/s out of one node over all its NICs."""
        if self.nics_per_node is not None and self.nic_bytes_per_s is not None:
            return self.nics_per_node * self.nic_bytes_per_s
        return self.bytes_per_s_per_device * (self.devices_per_node or 1)


@dataclass(frozen=True)
class Interconnect:
    link: str
    topology: ChipTopology
    link_bytes_per_s: float  # one-way, per link
    links_per_chip: int
    hop_latency_s: float
    scale_up_devices: int
    torus_dims: tuple[int, ...] = ()
    wraparound: Wraparound = "full-axis"  # when a torus axis shorter than the full dim wraps
    in_network_reduction: bool = False
    scale_out: ScaleOut | None = None
    library: CollectiveLibrary = "none"  # who runs the collectives (nccl, rccl, xla)
    # the scale-up switches' aggregate one-way capacity (None: non-blocking)
    switch_bytes_per_s: float | None = None

    @property
    def egress_bytes_per_s(self) -> float:
        """One-way bytes/s a device can push into the scale-up fabric over all its links."""
        return self.link_bytes_per_s * self.links_per_chip


@dataclass(frozen=True)
class Achievable:
    matmul_flops_per_s: dict[str, float] = field(default_factory=dict)
    mem_bytes_per_s: float | None = None
    launch_overhead_s: float | None = None
    collective_bus_efficiency: float | None = None
    # all-reduce reduced inside the switch (NVLink SHARP): measured time against the V/W bound
    in_network_reduction_efficiency: float | None = None
    collective_half_efficiency_bytes: float | None = None
    # the shortest collective inside one node (nccl-tests' smallest all-reduce on all its
    # devices): below it no size goes, whatever the library's model says
    collective_latency_s: float | None = None
    per_call_overhead_s: float | None = None
    # calibrated files (shardline.calibrate): CPU BLAS packing rate of the inputs, in bytes/s,
    # and the matmul rate with unaligned dimensions as a fraction of the aligned rate
    pack_bytes_per_s: float | None = None
    unaligned_matmul_efficiency: float | None = None
    # fused attention kernels (FlashAttention-style): achieved FLOP/s of the forward and of the
    # backward kernel as a fraction of the dense peak of the compute dtype (FLOPs counted with
    # the causal saving; the backward kernel does 2.5x the forward's FLOPs)
    attention_fwd_efficiency: float | None = None
    attention_bwd_efficiency: float | None = None
    # the shortest time one kernel takes on the device (ramp up and drain), whether launched
    # eagerly or replayed from a CUDA graph; eager launches cost max(launch_overhead_s, ...)
    kernel_floor_s: float | None = None
    # the same floor for a library GEMM kernel (tiled, pipelined: its prologue and epilogue make
    # it longer than a streaming kernel's); absent: kernel_floor_s
    gemm_kernel_floor_s: float | None = None
    # the matmul rate the chip holds under sustained full load at its power limit (every GPU of
    # the board busy) as a fraction of the short-burst achievable rate above (MSMF / MAMF); the
    # realistic model of a training step applies it to the tensor-core work
    # (shardline.realistic.sustained); absent: 1
    sustained_matmul_fraction: float | None = None
    # the same two efficiencies per named kernel ("fa2", "cudnn", "fa3", ...): a framework that
    # runs a given kernel (Execution.attention_kernel) uses its figures in place of the two above
    attention_kernels: dict[str, tuple[float, float]] = field(default_factory=dict)
    # the decode attention kernel over a multi-head latent (MLA) cache that the serving engines
    # run on this chip (FlashMLA on Hopper): its compute-bound FLOP/s, whatever the step's dtype
    # (the published figure is the bf16 kernel's); absent: the fused attention figures above
    mla_decode_flops_per_s: float | None = None
    # the HBM rate at which the engines' fused MoE kernel streams a decode step's routed expert
    # weights (one grouped GEMM over many experts of a few rows each falls short of a streaming
    # read); absent: mem_bytes_per_s
    moe_decode_bytes_per_s: float | None = None


@dataclass(frozen=True)
class Power:
    """The board's power figures (watts): `tdp_w` the design power its achievable figures were
    measured at, `static_w` the part that does not follow the SM clock (the board idle at P0:
    HBM, fabric, leakage), `limit_w` the limit it runs under (nvidia-smi -pl; a variant's
    default, or the user's --power-cap). The compute rates follow the clock the limit allows
    (shardline.hardware.power)."""

    tdp_w: float
    static_w: float
    limit_w: float


@dataclass(frozen=True)
class Chip:
    name: str
    display_name: str
    kind: ChipKind
    vendor: str
    peak_flops_per_s: dict[str, float]
    capacity_bytes: float
    mem_bytes_per_s: float
    aliases: tuple[str, ...] = ()
    on_chip: OnChip = field(default_factory=OnChip)
    interconnect: Interconnect | None = None
    achievable: Achievable = field(default_factory=Achievable)
    sources: dict[str, str] = field(default_factory=dict)
    path: str | None = None
    measured_on: str | None = None  # calibrated files: the machine kind they were measured on
    # the rate of the units outside the matrix engine (CUDA cores, the TPU VPU) per dtype, as the
    # vendor counts it (an FMA is two FLOPs); int32 in integer ops per second
    vector_flops_per_s: dict[str, float] = field(default_factory=dict)
    # the memory the device reports (nvidia-smi, rocm-smi), beside the marketed capacity_bytes
    reported_capacity_bytes: float | None = None
    power: Power | None = None

    @property
    def usable_capacity_bytes(self) -> float:
        """The capacity the fits checks use: what the device reports where the chip file gives
        it (an "80 GB" H100 reports 81,559 MiB), else the marketed figure."""
        return self.reported_capacity_bytes or self.capacity_bytes

    def vector_rate(self, dtype: str) -> float | None:
        """FLOP/s of the vector units (not the matrix engine) for elementwise work in `dtype`:
        the dtype's own rate, else the fp32 rate (kernels widen 8- and 16-bit values to fp32),
        else None (the chip file gives none)."""
        rates = self.vector_flops_per_s
        key = dtype if dtype in rates else canonical_dtype(dtype)
        return rates.get(key) or rates.get("fp32")

    @property
    def assumptions(self) -> dict[str, str]:
        """The fields the chip file left out and the loader filled: dotted path -> why."""
        return {k: v for k, v in self.sources.items() if v.startswith(ASSUMED)}

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(self.peak_flops_per_s)

    @property
    def default_dtype(self) -> str:
        """bf16 where the chip computes in it (the usual ML dtype), else fp32, else its first."""
        for dtype in ("bf16", "fp32"):
            if dtype in self.peak_flops_per_s:
                return dtype
        return next(iter(self.peak_flops_per_s))

    def peak(self, compute_dtype: str) -> float:
        """Dense peak FLOP/s for a compute dtype: the matrix units' rate, else, for a dtype only
        the vector units run (an int32 matmul on the CUDA cores: no tensor-core int32), their
        own rate for it (`vector_flops_per_s`, that dtype named, not the fp32 fallback); a
        dtype the chip has neither for is an input error."""
        key = canonical_dtype(compute_dtype)
        if key in self.peak_flops_per_s:
            return self.peak_flops_per_s[key]
        if self.vector_flops_per_s.get(key):
            return self.vector_flops_per_s[key]
        vector_only = [d for d in self.vector_flops_per_s if d not in self.peak_flops_per_s]
        have = ", ".join([*self.peak_flops_per_s, *vector_only])
        raise InputError(f"{self.name} cannot compute in {key}; it has: {have}")

    def ridge(self, compute_dtype: str) -> float:
        """Critical intensity P / W_mem in FLOP/byte (docs/single-device.md)."""
        return self.peak(compute_dtype) / self.mem_bytes_per_s

    def with_overrides(
        self,
        *,
        compute_dtype: str | None = None,
        flops_per_s: float | None = None,
        mem_bytes_per_s: float | None = None,
    ) -> Chip:
        """A copy with the user's peak (for one compute dtype) and HBM bandwidth put in. The
        measured `achievable` figures scale with them (the same fraction of the new peak), so that
        the realistic prediction never undercuts the overridden lower bound."""
        chip = self
        if flops_per_s is not None:
            if compute_dtype is None:
                raise InputError("--flops-per-s needs a compute dtype")
            key = canonical_dtype(compute_dtype)
            peaks = dict(chip.peak_flops_per_s)
            peaks[key] = float(flops_per_s)
            sources = dict(chip.sources)
            sources[f"peak_flops_per_s.{key}"] = "user override"
            rates = dict(chip.achievable.matmul_flops_per_s)
            if key in rates and chip.peak_flops_per_s.get(key):
                rates[key] *= float(flops_per_s) / chip.peak_flops_per_s[key]
            chip = replace(
                chip,
                peak_flops_per_s=peaks,
                sources=sources,
                achievable=replace(chip.achievable, matmul_flops_per_s=rates),
            )
        if mem_bytes_per_s is not None:
            sources = dict(chip.sources)
            sources["memory.bytes_per_s"] = "user override"
            achieved = chip.achievable.mem_bytes_per_s
            if achieved is not None:
                achieved *= float(mem_bytes_per_s) / chip.mem_bytes_per_s
            chip = replace(
                chip,
                mem_bytes_per_s=float(mem_bytes_per_s),
                sources=sources,
                achievable=replace(chip.achievable, mem_bytes_per_s=achieved),
            )
        return chip
