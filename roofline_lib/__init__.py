"""roofline_lib: a naive Transformer layer, a verified ladder of faster versions, and honest measurements.

The public names below are imported on first use (PEP 562), so `import roofline_lib` and the command
line's `--help` stay fast: torch is imported only once something that needs it is asked for.
"""
from __future__ import annotations

import importlib

__version__ = "0.3.0"

_PUBLIC = {  # name → the module that defines it
    "ReferenceLayer": "core.reference",
    "SUITE": "core.shapes", "SMOKE_SUITE": "core.shapes", "Shape": "core.shapes", "select_rows": "core.shapes",
    "float64_truth": "core.truth", "sample_rows": "core.truth",
    "VariantUnavailable": "core.outcome", "Infeasible": "core.outcome",
    "Case": "core.correctness", "VerifyResult": "core.correctness",
    "DATASHEET": "measure.ceilings", "Ceilings": "measure.ceilings", "datasheet": "measure.ceilings",
    "datasheet_ceilings": "measure.ceilings", "measure_ceilings": "measure.ceilings",
    "CATEGORIES": "measure.profile_rules", "Profile": "measure.profile_events",
    "profile_layer": "measure.profiler", "diff_profiles": "measure.profile_analysis",
    "mask_share_table": "measure.profile_analysis",
    "add_roofline": "measure.roofline", "flop_crosscheck": "measure.roofline", "fraction_table": "measure.roofline",
    "layer_flops": "measure.roofline", "layer_min_bytes": "measure.roofline", "op_costs": "measure.roofline",
    "roofline_table": "measure.roofline",
    "VARIANTS": "variants", "PEERS": "variants.peers", "build_variant": "variants.registry",
    "select_variants": "variants.registry",
    "verify": "runs.pipeline", "run_sweep": "runs.sweep",
    "SuiteProfile": "runs.profile_suite", "profile_suite": "runs.profile_suite",
    "profile_variant": "runs.profile_suite",
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'roofline_lib' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
