"""Studies (layer 4): the reproduction of the published tables, the tuning study and the validation
against recorded real vLLM runs.  Each returns tables; drawing is in :mod:`specsim.plots`."""
