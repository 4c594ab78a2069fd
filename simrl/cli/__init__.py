"""Click command-line tools: `srl`, `srl-sweep`, `srl-regress`, `srl-plot`, `srl-compare`, ..."""
