"""Cost models: per-operator cost in microseconds (DESIGN.md section 7)."""
