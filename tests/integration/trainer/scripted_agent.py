"""A scripted multi-turn agent that talks to OpenEnv's REAL capture proxy, for the CPU training test.

Stands in for the env server + sandbox + mini-swe-agent (another engineer's service, which needs task
images built by Docker). Everything on the token path is real: each model call goes through the capture
proxy (OpenEnv's `create_app`) to the mock engine, and the rollout handed to the trainer is OpenEnv's own
`turns_from_document` over the proxy's `/sessions/{id}/rollout` export, the same conversion the env
server's `run_rollout` uses. What is scripted: the tool outputs (fixed text instead of executing whatever
a random tiny model asks for) and the verifier. The loop ends the way mini-swe-agent's does: on the
submit command, on a reply with no tool call, or at the step limit. With the mock engine's scripted mode
(MOCK_SCRIPT_FILE) some rollouts follow a known-good action list (forced tokens, scored with the model's
real logprobs) and submit; the rest are the tiny model's own samples. The stand-in verifier gives 1.0 (plus a
tie-break under 0.001, see `_rollout`) to a submitted rollout and a small deterministic partial score (from the
sampled ids) otherwise, so every group has spread and the loss has a gradient.

Module-level and frozen: TRL pickles the runner into its spawned rollout process.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import httpx
from openenv.harbor.models import HarborRolloutResult, turns_from_document

from trainer.rollouts.factory import prompt_row

SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a bash command and return its output.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}


@dataclass(frozen=True)
class ScriptedAgentRunner:
    capture_url: str
    model: str
    turns: int = 3
    max_tokens: int = 128  # a scripted tool call (the submit command) is ~115 characters: one token each
    tasks: tuple[str, ...] = ("List the files in the repository.", "Show the README of the repository.")
    # mini-swe-agent answers a reply without a tool call with a format-error message and goes on; the CPU test
    # ends the rollout there instead (its scripted engine always calls a tool when on script). The GPU check
    # (tests/gpu) needs it: a random-weight model almost never writes a tool call, and multi-turn chaining is
    # what it checks.
    nudge: str = ""

    def task_rows(self):
        return [prompt_row("local", i, text, f"local-{i}") for i, text in enumerate(self.tasks)]

    def run(self, ref, sampling, episode_id) -> HarborRolloutResult:
        return self._rollout(ref, {"sampling": sampling, "max_model_calls": self.turns})

    def evaluate(self, ref, eval_sampling) -> HarborRolloutResult:
        """An eval rollout, as the env server starts one for `run_rollout(purpose="eval")`: the proxy's
        session carries OpenEnv's eval purpose and eval sampling, and the result is stamped `eval`."""
        return self._rollout(ref, {"purpose": "eval", "eval_sampling": eval_sampling, "max_model_calls": self.turns})

    def _rollout(self, ref, session: dict) -> HarborRolloutResult:
        with httpx.Client(base_url=self.capture_url, timeout=120) as http:
            created = http.post("/sessions", json=session).raise_for_status().json()
            sid = created["session_id"]
            messages = [
                {"role": "system", "content": "You are a coding agent. Use the bash tool."},
                {"role": "user", "content": ref.instruction},
            ]
            submitted = False
            for step in range(self.turns):
                reply = (
                    http.post(
                        "/v1/chat/completions",
                        headers={"Authorization": f"Bearer {sid}"},
                        json={
                            "model": self.model,
                            "messages": messages,
                            "tools": [BASH_TOOL],
                            "max_tokens": self.max_tokens,
                        },
                    )
                    .raise_for_status()
                    .json()
                )
                message = reply["choices"][0]["message"]
                assistant = {"role": "assistant", "content": message.get("content") or ""}
                if message.get("tool_calls"):
                    assistant["tool_calls"] = message["tool_calls"]
                messages.append(assistant)
                for call in message.get("tool_calls") or []:
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": f"ok (step {step})"})
                    submitted = submitted or SUBMIT in str(call.get("function", {}).get("arguments", ""))
                if submitted or (not message.get("tool_calls") and not self.nudge):
                    break
                if not message.get("tool_calls"):
                    messages.append({"role": "user", "content": self.nudge})
            document = (
                http.get(f"/sessions/{sid}/rollout", params={"include_messages": "true"}).raise_for_status().json()
            )
            http.delete(f"/sessions/{sid}")
        turns = turns_from_document(document)
        sampled = [tid for t in turns for tid in t.completion_token_ids]
        # A submitted rollout scores 1.0 plus a tie-break under 0.001 from its session id. Why: an on-script rollout's
        # tokens are forced, so every on-script rollout of a group is the same text and, scored 1.0 flat, a group whose
        # 4 coins all said "script" (1 in 16) had zero spread, zero advantage and no gradient. CI once drew such
        # groups for both steps of test_two_steps_then_resume: grad_norm 0, the weights did not move, and the test
        # failed on chance. Still >= 1.0, so evaluation and screening count it solved (CORRECT_AT).
        if submitted:
            reward = 1.0 + (zlib.crc32(sid.encode()) % 1000) / 1_000_000
        else:
            reward = (zlib.crc32(str(sampled).encode()) % 1000) / 2000
        return HarborRolloutResult(
            task_id=f"local-{ref.index}",
            task_name=f"local-{ref.index}",
            dataset="local",
            harness="scripted",
            sandbox="local",
            session_id=sid,
            reward=reward,
            rollout_type=created.get("rollout_type") or document.get("rollout_type", "train"),
            capture_level=document.get("capture_level", "tokens"),
            turns=turns,
            n_turns=document["stats"]["n_turns"],
            n_roots=document["stats"]["n_roots"],
            findings=[f for f in document.get("validation", []) if not f.startswith("[INFO]")],
        )
