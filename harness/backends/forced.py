"""Shared pieces of the real drivers: forced-length request options and exact-length synthetic text.

Forced length L: ``min_tokens = max_tokens = L`` with ``ignore_eos`` and no stop strings (vLLM);
sent through the OpenAI client's ``extra_body`` so the model's chat-template defaults survive the
native client merge. Prompts are filler text sized with the model's own chat template to the
schedule's prompt length; the evidence records the prompt length actually sent.
"""

from __future__ import annotations

from harness.pins import CHAT_TEMPLATE_KWARGS

FILLER = " lorem"  # one token per repeat for Qwen tokenizers; sizes are re-measured anyway


def request_options(length: int, cache_salt: str | None = None) -> dict:
    """kwargs for ``client.chat.completions.create`` forcing exactly ``length`` completion tokens."""
    extra = {"min_tokens": length, "ignore_eos": True, "chat_template_kwargs": dict(CHAT_TEMPLATE_KWARGS)}
    if cache_salt is not None:
        extra["cache_salt"] = cache_salt
    return {"max_tokens": length, "stop": None, "temperature": 1.0, "top_p": 1.0, "extra_body": extra}


def sized_text(tokenizer, messages: list[dict], target_tokens: int) -> str:
    """Filler text that brings the templated conversation to about ``target_tokens`` tokens."""

    def length(n: int) -> int:
        msgs = [*messages, {"role": "user", "content": FILLER * n}]
        return len(tokenizer.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True,
                                                 **CHAT_TEMPLATE_KWARGS))

    lo, hi = 0, max(1, target_tokens)
    while lo < hi:  # smallest n whose templated length reaches the target
        mid = (lo + hi) // 2
        if length(mid) < target_tokens:
            lo = mid + 1
        else:
            hi = mid
    return FILLER * lo


def check_completion(length: int, usage_tokens: int, finish_reason: str) -> str | None:
    """None if the call produced exactly its forced length; otherwise why not."""
    if usage_tokens != length or finish_reason != "length":
        return f"forced {length} tokens, got {usage_tokens} ({finish_reason})"
    return None
