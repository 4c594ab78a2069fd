"""Profilers (`srl-profile`): drive vLLM, Megatron-Bridge, FSDP2, kernels or a KV probe and record JSONL observations. Heavy dependencies are imported lazily."""
