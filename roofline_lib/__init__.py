"""roofline_lib: a naive Transformer layer, a verified ladder of faster versions, and honest measurements."""
from .reference import ReferenceLayer
from .shapes import SMOKE_SUITE, SUITE, Shape, select_rows
from .truth import float64_truth, sample_rows
from .variants import VARIANTS, VariantUnavailable, build_variant, select_variants
from .correctness import Case, VerifyResult, verify
from .ceilings import DATASHEET, Ceilings, datasheet, datasheet_ceilings, measure_ceilings
from .profiling import (CATEGORIES, Profile, SuiteProfile, diff_profiles, mask_share_table, profile_layer,
                        profile_suite, profile_variant)
from .roofline import (add_roofline, flop_crosscheck, fraction_table, layer_flops, layer_min_bytes, op_costs,
                       roofline_table)

__all__ = [
    "ReferenceLayer", "SUITE", "SMOKE_SUITE", "Shape", "select_rows", "float64_truth", "sample_rows",
    "VARIANTS", "VariantUnavailable", "build_variant", "select_variants", "Case", "VerifyResult", "verify",
    "DATASHEET", "Ceilings", "datasheet", "datasheet_ceilings", "measure_ceilings",
    "CATEGORIES", "Profile", "SuiteProfile", "diff_profiles", "mask_share_table", "profile_layer", "profile_suite",
    "profile_variant", "add_roofline", "flop_crosscheck", "fraction_table", "layer_flops", "layer_min_bytes",
    "op_costs", "roofline_table",
]
