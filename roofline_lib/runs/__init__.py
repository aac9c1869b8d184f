"""Experiments that build, check and time variants: the sweep, profiles of a suite, long context, stacks."""
