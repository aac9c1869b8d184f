"""roofline_lib: a naive Transformer layer, a verified ladder of faster versions, and honest measurements."""
from .reference import ReferenceLayer
from .shapes import SMOKE_SUITE, SUITE, Shape, select_rows
from .truth import float64_truth, sample_rows
from .variants import VARIANTS, VariantUnavailable, build_variant, select_variants
from .correctness import Case, VerifyResult, verify

__all__ = [
    "ReferenceLayer", "SUITE", "SMOKE_SUITE", "Shape", "select_rows", "float64_truth", "sample_rows",
    "VARIANTS", "VariantUnavailable", "build_variant", "select_variants", "Case", "VerifyResult", "verify",
]
