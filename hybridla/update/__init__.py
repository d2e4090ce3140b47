"""Trailing-matrix updates, written once against the backend's operations (every backend runs them)."""
