"""Deadline-aware real-time recognition: scheduler, cost model, sources."""
