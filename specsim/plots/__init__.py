"""Figures (layer 5): drawing only, from what the studies return (reproduction, tuning, validation)."""
