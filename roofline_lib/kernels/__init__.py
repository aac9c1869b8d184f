"""Hand-written Triton kernels. Each module imports Triton itself, so importing this package never needs it."""
