"""Simulated GPUs behind dcgm-exporter's and Ray's ``/metrics``, with the exact truth of what they did.

:class:`GPUFleet` holds GPUs on hosts, each serving a role (``rollout`` GPUs under the vLLM servers, ``trainer`` GPUs
under the policy update). A GPU's utilization is a step function of time set by the workload
(:meth:`GPUFleet.set_utilization`: busy during generation on rollout GPUs, during updates on trainer GPUs); its power
follows from it and its energy counter integrates that power exactly. :meth:`GPUFleet.truth` answers, for any
interval and role, the time-weighted mean utilization, the idle GPU-seconds and the joules, so tests compare the
bridge's records with what the GPUs did.

Each host's text is what the real exporters print, names, types, units and labels from their sources:

- dcgm-exporter 4.5.3-4.8.2 (``etc/default-counters.csv``, ``internal/pkg/rendermetrics/render_metrics.go``): one
  series per GPU labelled ``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``,
  ``DCGM_FI_DRIVER_VERSION``; ``DCGM_FI_DEV_GPU_UTIL`` in %, ``DCGM_FI_DEV_POWER_USAGE`` in W,
  ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` a counter in mJ, ``DCGM_FI_DEV_FB_USED``/``_FREE`` in MiB, the
  ``DCGM_FI_PROF_*`` activity fields as ratios (integer fields printed with ``%d``, floating ones with ``%f``, as the
  exporter's ``toString`` does; the fixture ``tests/fixtures/dcgm/`` is rendered from the same source);
- Ray's metrics agent (``ray/dashboard/modules/reporter/reporter_agent.py``, ``_to_records``): one
  ``ray_node_gpus_utilization`` series per GPU (0..100), labelled with the node's tags and ``GpuIndex``,
  ``GpuDeviceName``, ``GpuUuid``; ``ray_node_gram_used`` in MiB.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

MODEL_NAME: Final = "NVIDIA H100 80GB HBM3"
DRIVER_VERSION: Final = "570.133.20"
FB_TOTAL_MIB: Final = 81559
IDLE_WATTS: Final = 70.0
BUSY_WATTS: Final = 700.0


@dataclass(frozen=True, slots=True)
class GPUTruth:
    """What a set of GPUs did over an interval: GPU count, time-weighted mean utilization (%), idle GPU-seconds
    (each GPU's seconds x (1 - utilization / 100), summed) and energy (J)."""

    gpus: int
    mean_utilization: float
    idle_gpu_seconds: float
    joules: float


@dataclass
class SimulatedGPU:
    """One GPU: where it is, what it serves, and its utilization as a step function of time."""

    host: str
    index: int
    role: str
    changes: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    @property
    def uuid(self) -> str:
        """A stable UUID in NVIDIA's ``GPU-`` form, derived from the host and index."""
        digest = f"{zlib.crc32(f'{self.host}/{self.index}'.encode()):012x}"
        return f"GPU-{self.index:08x}-0000-0000-0000-{digest}"

    def utilization_at(self, t: float) -> float:
        """The utilization (%) in force at ``t``."""
        position = bisect.bisect_right(self.changes, t) - 1
        return self.values[position] if position >= 0 else 0.0

    def integral(self, start: float, end: float, of: Callable[[float], float]) -> float:
        """The integral over ``(start, end]`` of ``of(utilization)``, exact for the step function."""
        if end <= start:
            return 0.0
        points = [start, *(t for t in self.changes if start < t < end), end]
        return math.fsum(of(self.utilization_at(a)) * (b - a) for a, b in itertools.pairwise(points) if b > a)


def watts(utilization: float) -> float:
    """The simulated power draw at ``utilization`` (%): linear between idle and busy."""
    return IDLE_WATTS + (BUSY_WATTS - IDLE_WATTS) * utilization / 100.0


class GPUFleet:
    """GPUs on hosts with roles; set their utilization by role, render each host's exporters, tell the truth.

    ``layout`` maps a host name to the role of each of its GPUs (index order), e.g.
    ``{"gpu-node-0": ["rollout"] * 4, "gpu-node-1": ["trainer"] * 4}``; a colocated run gives GPUs both roles by
    naming them after what they serve at the time. ``clock`` is the time source (unix seconds); ``born`` the time
    every GPU's energy counter starts from (``energy_offset_mj`` then, as a GPU counts since boot).
    """

    def __init__(
        self,
        layout: Mapping[str, Sequence[str]],
        *,
        clock: Callable[[], float] = time.time,
        energy_offset_mj: float = 1e9,
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._born = clock()
        self._offset_mj = energy_offset_mj
        self.gpus = [
            SimulatedGPU(host, index, role, [self._born], [0.0])
            for host, roles in layout.items()
            for index, role in enumerate(roles)
        ]

    @property
    def hosts(self) -> list[str]:
        """The hosts, in layout order."""
        return list(dict.fromkeys(g.host for g in self.gpus))

    def set_utilization(self, role: str, percent: float) -> float:
        """From now on every GPU of ``role`` runs at ``percent`` (0..100); returns the time of the change."""
        if not 0.0 <= percent <= 100.0:
            raise ValueError(f"utilization must be within 0..100 %, got {percent}")
        with self._lock:
            now = self._clock()
            for gpu in self.gpus:
                if gpu.role == role:
                    gpu.changes.append(now)
                    gpu.values.append(percent)
            return now

    def truth(self, start: float, end: float, role: str | None = None) -> GPUTruth:
        """What the GPUs (of ``role``, or all) did during ``(start, end]``."""
        with self._lock:
            chosen = [g for g in self.gpus if role is None or g.role == role]
            busy = math.fsum(g.integral(start, end, lambda u: u / 100.0) for g in chosen)
            joules = math.fsum(g.integral(start, end, watts) for g in chosen)
        seconds = max(end - start, 0.0)
        gpu_seconds = seconds * len(chosen)
        mean = 100.0 * busy / gpu_seconds if gpu_seconds > 0 else math.nan
        return GPUTruth(len(chosen), mean, gpu_seconds - busy, joules)

    def _energy_mj(self, gpu: SimulatedGPU, t: float) -> int:
        return int(self._offset_mj + 1000.0 * gpu.integral(self._born, t, watts))

    def dcgm_exposition(self, host: str) -> bytes:
        """dcgm-exporter's ``/metrics`` text for ``host``'s GPUs, now."""
        with self._lock:
            now = self._clock()
            gpus = [g for g in self.gpus if g.host == host]
            rows: list[tuple[str, str, str, Callable[[SimulatedGPU], str]]] = [
                ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", lambda g: f"{_temp(g, now):d}"),
                ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda g: f"{_power(g, now):f}"),
                (
                    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                    "counter",
                    "Total energy consumption since boot (in mJ).",
                    lambda g: f"{self._energy_mj(g, now):d}",
                ),
                ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", lambda g: f"{_util(g, now):d}"),
                ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", lambda g: f"{_fb_free(g):d}"),
                ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", lambda g: f"{_fb_used(g):d}"),
                *(
                    (name, "gauge", help_text, functools.partial(_ratio_text, t=now, share=share))
                    for name, help_text, share in _PROF_FIELDS
                ),
            ]
            lines: list[str] = []
            for name, kind, help_text, value in rows:
                lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
                lines += [f"{name}{{{_dcgm_labels(g)}}} {value(g)}" for g in gpus]
        return ("\n".join(lines) + "\n").encode()

    def ray_exposition(self, host: str, ip: str) -> bytes:
        """Ray's metrics agent ``/metrics`` GPU gauges for ``host``'s GPUs (node address ``ip``, a label only), now."""
        with self._lock:
            now = self._clock()
            gpus = [g for g in self.gpus if g.host == host]
            lines = [
                "# HELP ray_node_gpus_utilization Total GPUs usage on a ray node",
                "# TYPE ray_node_gpus_utilization gauge",
                *(f"ray_node_gpus_utilization{{{_ray_labels(g, ip)}}} {float(_util(g, now))}" for g in gpus),
                "# HELP ray_node_gram_used Total GPU RAM usage on a ray node",
                "# TYPE ray_node_gram_used gauge",
                *(f"ray_node_gram_used{{{_ray_labels(g, ip)}}} {float(_fb_used(g))}" for g in gpus),
            ]
        return ("\n".join(lines) + "\n").encode()


# dcgm-exporter's profiling fields served here (help texts from its counters CSV), each a ratio of the utilization.
_PROF_FIELDS: Final = (
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", 1.0),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.", 0.6),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        0.4,
    ),
)


def _ratio_text(gpu: SimulatedGPU, *, t: float, share: float) -> str:
    return f"{round(share * gpu.utilization_at(t) / 100.0, 6):f}"


def _util(gpu: SimulatedGPU, t: float) -> int:
    return round(gpu.utilization_at(t))


def _power(gpu: SimulatedGPU, t: float) -> float:
    return watts(gpu.utilization_at(t))


def _temp(gpu: SimulatedGPU, t: float) -> int:
    return round(35 + 0.4 * gpu.utilization_at(t))


def _fb_used(gpu: SimulatedGPU) -> int:
    return 70_000 if gpu.role == "rollout" else 52_000 + 1_000 * gpu.index


def _fb_free(gpu: SimulatedGPU) -> int:
    return FB_TOTAL_MIB - _fb_used(gpu)


def _dcgm_labels(gpu: SimulatedGPU) -> str:
    bus = f"00000000:{0x18 + 0x10 * gpu.index:02X}:00.0"
    return (
        f'gpu="{gpu.index}",UUID="{gpu.uuid}",pci_bus_id="{bus}",device="nvidia{gpu.index}",'
        f'modelName="{MODEL_NAME}",Hostname="{gpu.host}",DCGM_FI_DRIVER_VERSION="{DRIVER_VERSION}"'
    )


def _ray_labels(gpu: SimulatedGPU, ip: str) -> str:
    return (
        f'GpuDeviceName="{MODEL_NAME}",GpuIndex="{gpu.index}",GpuUuid="{gpu.uuid}",IsHeadNode="false",'
        f'RayNodeType="worker",SessionName="session_demo",Version="2.60.0",ip="{ip}"'
    )
