"""roofline_lib: a naive Transformer layer, a verified ladder of faster versions, and honest measurements.

The public names below are imported on first use (PEP 562), so `import roofline_lib` and the command
line's `--help` stay fast: torch is imported only once something that needs it is asked for.
"""
from __future__ import annotations

import importlib

__version__ = "0.2.0"

_PUBLIC = {  # name → the module that defines it
    "ReferenceLayer": "reference",
    "SUITE": "shapes", "SMOKE_SUITE": "shapes", "Shape": "shapes", "select_rows": "shapes",
    "float64_truth": "truth", "sample_rows": "truth",
    "VARIANTS": "variants", "PEERS": "peers", "build_variant": "registry", "select_variants": "registry",
    "VariantUnavailable": "outcome", "Infeasible": "outcome",
    "Case": "correctness", "VerifyResult": "correctness", "verify": "pipeline",
    "DATASHEET": "ceilings", "Ceilings": "ceilings", "datasheet": "ceilings", "datasheet_ceilings": "ceilings",
    "measure_ceilings": "ceilings",
    "CATEGORIES": "profiling", "Profile": "profiling", "SuiteProfile": "profiling", "diff_profiles": "profiling",
    "mask_share_table": "profiling", "profile_layer": "profiling", "profile_suite": "profiling",
    "profile_variant": "profiling",
    "add_roofline": "roofline", "flop_crosscheck": "roofline", "fraction_table": "roofline",
    "layer_flops": "roofline", "layer_min_bytes": "roofline", "op_costs": "roofline", "roofline_table": "roofline",
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
