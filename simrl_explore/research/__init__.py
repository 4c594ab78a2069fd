"""`srl-research`: a strategy registry and three agents (proposal, validation, analysis)."""
