"""Cost models: rollout, training and weight sync families behind the `simrl.cost.base` seam.

`base` is the seam the engine queries; `family` the protocol every family implements;
`registry` the one table of families; `artifact` the fitted-artifact file format; `build` turns
a `SimConfig` into `Costs` (with their provenance); `fit` fits and evaluates any fittable family.
"""
