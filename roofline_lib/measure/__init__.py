"""Measuring on a device: the timing protocol, ceilings, the roofline, and `torch.profiler` tables."""
