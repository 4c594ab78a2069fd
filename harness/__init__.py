"""The benchmark harness (`bench`): ART and SkyRL native async pipelines, leases, manifests, validation."""
