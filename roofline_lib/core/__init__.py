"""The fixed layer and what every other layer stands on: shapes, the float64 truth, the §3 check, devices."""
