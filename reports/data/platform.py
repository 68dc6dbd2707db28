"""The run manifest as the page shows it: the platform line, its facts and every field."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field



@dataclass(frozen=True)
class PlatformSummary:
    """The run manifest as the page shows it: one header line, the measured facts, every field flat."""
    line: str
    facts: list[tuple[str, str]]
    fields: list[tuple[str, str]]
    emulation: str | None
    hosts: list = field(default_factory=list)     # a merged run's machines (runs.merge)


def _flatten(obj, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(obj, Mapping):
        return [kv for k, v in obj.items() for kv in _flatten(v, f"{prefix}{k}.")]
    return [(prefix.rstrip("."), "-" if obj is None else str(obj).lower() if isinstance(obj, bool) else str(obj))]


def platform_summary(manifest: Mapping | None) -> PlatformSummary | None:
    if not isinstance(manifest, Mapping):
        return None
    fw = manifest.get("framework") or {}
    cpu = manifest.get("cpu") or {}
    versions = manifest.get("versions") or {}
    accel = manifest.get("cuda") or manifest.get("npu")
    parts = [f"device {manifest.get('device', '?')}",
             f"CPU {cpu.get('model') or '?'} ({cpu.get('torch_cpu_capability') or '?'})",
             f"torch {versions.get('torch') or '?'}"]
    if isinstance(accel, Mapping):
        parts.append(" ".join(str(accel.get(k)) for k in ("device", "soc", "compute_capability", "cuda", "cann")
                              if accel.get(k)))
    commit = fw.get("commit")
    parts.append(f"commit {commit[:10] if commit else '?'}{' (modified)' if fw.get('dirty') else ''}")
    facts = [(k, _flatten(v)[0][1]) for k, v in (manifest.get("facts") or {}).items()]
    hosts = [{"host": h.get("host"), "device": h.get("device"), "shard": h.get("shard"),
              "cpu": (h.get("cpu") or {}).get("model"), "capability": (h.get("cpu") or {}).get("torch_cpu_capability"),
              "facts": ", ".join(f"{k}={v}" for k, v in (h.get("facts") or {}).items()), "source": h.get("source")}
             for h in manifest.get("hosts") or [] if isinstance(h, Mapping)]
    return PlatformSummary(" · ".join(parts), facts, _flatten({k: v for k, v in manifest.items() if k != "hosts"}),
                           manifest.get("emulation"), hosts)
