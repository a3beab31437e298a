"""An agent harness for `rollout.mode=openai_server`: ordinary `openai` client code, nothing from rlvr.

    rlvr train recipes/grpo.yaml rollout.mode=openai_server agent.harness=examples/harness_addition.py:solve

rlvr calls `solve` once per episode (many at once, from threads), with the task record and this episode's
endpoint. It returns its own reward; return None instead to let the task's verifier score the model's last
answer.
"""

import re

import openai

# One HTTP connection pool for every episode: building an OpenAI client with its own pool costs ~40 ms
# (SSL setup), with a shared one ~0.1 ms (measured on the 2-core dev VM). httpx clients are thread-safe.
HTTP = openai.DefaultHttpxClient()


def solve(record, *, base_url, api_key, model):
    client = openai.OpenAI(base_url=base_url, api_key=api_key, http_client=HTTP)
    reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": f"{record.question}="}])
    answer = re.search(r"A:(-?\d+)\s*$", reply.choices[0].message.content or "")
    return 1.0 if answer and answer.group(1) == str(record.answer) else 0.0
