"""Replanning a running deployment from its engines' metrics (issue 23): metrics, simulation; the re-solve is
`compiler.place.moves`. Work in progress: `gimletc replan` is not built yet."""
