"""System presets: one module per upstream framework, each a typed policy registered by name."""
