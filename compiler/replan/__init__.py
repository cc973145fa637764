"""Replanning a running deployment from its engines' metrics, ``gimletc replan``: metrics
(`metrics`), what they measure (`observe`), correction factors (`correct`), the forecast (`forecast`), the
re-solve and its decision (`replan`, on `compiler.place.moves`), the next plan directory (`write`) and a
simulation of a deployment that writes engine metrics (`simulate`)."""
