"""SimRL's exploration layer: design-space search (`srl-sweep`) and auto research (`srl-research`).

This package sits on top of the stack (workloads -> simrl -> presets -> simrl_fast -> here): it
may import all of them; none of them imports it. It uses the public entry points only
(`simrl.config.load_config`, `simrl.engine.sim.simulate`, `simrl.cost.build.build_costs`,
`simrl_fast.lowering.lower`, `simrl_fast.engine.run_params`).
"""
