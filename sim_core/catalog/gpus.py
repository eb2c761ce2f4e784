"""GPUs by aiconfigurator-core's system names: memory as the engine sees it, host memory.

`memory_bytes` is the total nvidia-smi reports for the part (vLLM sizes its KV cache from
torch's total, a little under it); `host_bytes` the host DRAM per GPU of the reference
system (DGX/HGX, or the Grace attached to it), 0 where no single system is typical.
`part` is the sim_core.catalog.hardware preset of the same GPU (roofline, tier bandwidths).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .hardware import PARTS, as_hardware

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class GPU:
    name: str  # aiconfigurator-core's system name
    memory_bytes: float
    host_bytes: float
    part: str = ""  # sim_core.catalog.hardware part ('' if none)
    source: str = ""


GPUS: dict[str, GPU] = {g.name: g for g in (
    GPU("h100_sxm", 81559 * MiB, 256 * GiB, "h100_sxm", "H100 80GB HBM3: 81559 MiB; DGX H100: 2 TB DRAM / 8 GPUs"),
    GPU("h200_sxm", 143771 * MiB, 256 * GiB, "h200", "H200 141GB HBM3e: 143771 MiB; DGX H200: 2 TB DRAM / 8 GPUs"),
    GPU("b200_sxm", 183359 * MiB, 512 * GiB, "b200", "B200 180GB HBM3e: 183359 MiB; DGX B200: 4 TB DRAM / 8 GPUs"),
    GPU("b300_sxm", 275040 * MiB, 256 * GiB, "", "B300 288GB HBM3e: 275040 MiB; DGX B300: 2 TB DRAM / 8 GPUs"),
    GPU("gb200", 189471 * MiB, 240 * GiB, "", "GB200: 189471 MiB; 480 GB LPDDR5X per Grace, two GPUs each"),
    GPU("gb300", 284208 * MiB, 240 * GiB, "", "GB300: 284208 MiB; 480 GB LPDDR5X per Grace, two GPUs each"),
    GPU("a100_sxm", 81920 * MiB, 128 * GiB, "", "A100 80GB: 81920 MiB; DGX A100: 1 TB DRAM / 8 GPUs"),
    GPU("l40s", 46068 * MiB, 0.0, "l40s", "L40S 48GB: 46068 MiB"),
    GPU("rtx_pro_6000_server", 97887 * MiB, 0.0, "", "RTX PRO 6000 Blackwell Server: 97887 MiB"),
)}
# our hardware part names that name one of these GPUs
ALIASES = {g.part: g.name for g in GPUS.values() if g.part and g.part != g.name}


def gpu_name(hardware) -> str | None:
    """The GPU's system name from `hardware` (a name, a mapping with `part`, a Hardware), or
    None when it names none of GPUS."""
    if hardware is None:
        return None
    if isinstance(hardware, Mapping):
        hardware = hardware.get("part") or hardware.get("name")
    name = str(getattr(hardware, "name", hardware)).lower()
    return ALIASES.get(name, name) if ALIASES.get(name, name) in GPUS else None


def resolve_hardware(hardware):
    """(sim_core.catalog.hardware part or None, GPU system name or None). A GPU without a part
    preset (gb200, ...) has no roofline or tier bandwidths but can run the measured model."""
    gpu = gpu_name(hardware)
    if gpu is None:
        try:
            return as_hardware(hardware), None
        except ValueError as e:
            if "unknown hardware part" not in str(e):
                raise
            raise ValueError(f"{e}; or one of the GPUs aiconfigurator-core measured (step_model=measured, KV "
                             f"capacity from memory): {', '.join(GPUS)}") from None
    part = GPUS[gpu].part
    if isinstance(hardware, str):
        return (as_hardware(part) if part in PARTS else None), gpu
    if isinstance(hardware, Mapping):
        return (as_hardware({**hardware, "part": part}) if part in PARTS else None), gpu
    return as_hardware(hardware), gpu
