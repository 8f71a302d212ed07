"""Dialect bindings: ``ragged`` plus the upstream dialects builders use."""
