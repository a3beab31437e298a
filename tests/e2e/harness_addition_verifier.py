"""A test harness: plain `openai` client code that asks the built-in model an addition problem and returns None,
so rlvr's verifier scores the final answer (tests/e2e/test_harness_train.py)."""

import openai

HTTP = openai.DefaultHttpxClient()  # one connection pool for all episodes (a client with its own costs ~40 ms)


def solve(record, *, base_url, api_key, model):
    client = openai.OpenAI(base_url=base_url, api_key=api_key, http_client=HTTP)
    client.chat.completions.create(model=model, messages=[{"role": "user", "content": f"{record.question}="}])
    return None
