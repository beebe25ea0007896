"""The conversation mini-swe-agent 2.4.6 holds for a task, as the engine receives it.

The learnable policy (mock_engine.build_policy) is fine-tuned on these turns, so its own samples are
actions the agent accepts. The templates are mini-swe-agent 2.4.6's default config (config/mini.yaml,
which Harbor 0.25.0 passes as `-c mini`), rendered the way its agent renders them (jinja2, StrictUndefined,
no trailing newline kept); tests/integration/mock_engine/test_policy.py compares the observation and
instance rendering with the package itself where it is installed. The bash tool is the one its LiteLLM
model sends on every call.
"""

from __future__ import annotations

import json

from mock_engine.script import SUBMIT_COMMAND
from stack import facts

SYSTEM_TEMPLATE = "You are a helpful assistant that can interact with a computer.\n"
INSTANCE_TEMPLATE = """Please solve this issue: {{task}}

You can execute bash commands and edit files to implement the necessary changes.

## Recommended Workflow

This workflow should be done step-by-step so that you can iterate on your changes and any possible problems.

1. Analyze the codebase by finding and reading relevant files
2. Create a script to reproduce the issue
3. Edit the source code to resolve the issue
4. Verify your fix works by running your script again
5. Test edge cases to ensure your fix is robust
6. Submit your changes and finish your work by issuing the following command: `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`.
   Do not combine it with any other command. <important>After this command, you cannot continue working on this task.</important>

## Command Execution Rules

You are operating in an environment where

1. You issue at least one command
2. The system executes the command(s) in a subshell
3. You see the result(s)
4. You write your next command(s)

Each response should include:

1. **Reasoning text** where you explain your analysis and plan
2. At least one tool call with your command

**CRITICAL REQUIREMENTS:**

- Your response SHOULD include reasoning text explaining what you're doing
- Your response MUST include AT LEAST ONE bash tool call
- Directory or environment variable changes are not persistent. Every action is executed in a new subshell.
- However, you can prefix any action with `MY_ENV_VAR=MY_VALUE cd /path/to/working/dir && ...` or write/load environment variables from files
- Submit your changes and finish your work by issuing the following command: `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`.
  Do not combine it with any other command. <important>After this command, you cannot continue working on this task.</important>

Example of a CORRECT response:
<example_response>
I need to understand the structure of the repository first. Let me check what files are in the current directory to get a better understanding of the codebase.

[Makes bash tool call with {"command": "ls -la"} as arguments]
</example_response>

<system_information>
{{system}} {{release}} {{version}} {{machine}}
</system_information>

## Useful command examples

### Create a new file:

```bash
cat <<'EOF' > newfile.py
import numpy as np
hello = "world"
print(hello)
EOF
```

### Edit files with sed:

{%- if system == "Darwin" -%}
<important>
You are on MacOS. For all the below examples, you need to use `sed -i ''` instead of `sed -i`.
</important>
{%- endif -%}

```bash
# Replace all occurrences
sed -i 's/old_string/new_string/g' filename.py

# Replace only first occurrence
sed -i 's/old_string/new_string/' filename.py

# Replace first occurrence on line 1
sed -i '1s/old_string/new_string/' filename.py

# Replace all occurrences in lines 1-10
sed -i '1,10s/old_string/new_string/g' filename.py
```

### View file content:

```bash
# View specific lines with numbers
nl -ba filename.py | sed -n '10,20p'
```

### Any other command you want to run

```bash
anything
```
"""
OBSERVATION_TEMPLATE = (
    '{%- if output.output | length < 10000 -%}\n{\n  "returncode": {{ output.returncode }},\n'
    '  "output": {{ output.output | tojson }}\n'
    '  {%- if output.exception_info %}, "exception_info": {{ output.exception_info | tojson }}{% endif %}\n}\n'
    '{%- else -%}\n{\n  "returncode": {{ output.returncode }},\n'
    '  "output_head": {{ output.output[:5000] | tojson }},\n'
    '  "output_tail": {{ output.output[-5000:] | tojson }},\n'
    '  "elided_chars": {{ output.output | length - 10000 }},\n  "warning": "Output too long."\n'
    '  {%- if output.exception_info %}, "exception_info": {{ output.exception_info | tojson }}{% endif %}\n}\n'
    "{%- endif -%}\n"
)
BASH_TOOL = facts.MINI_SWE_AGENT_BASH_TOOL
SUBMIT = SUBMIT_COMMAND


def render(template: str, **variables) -> str:
    from jinja2 import StrictUndefined, Template

    return Template(template, undefined=StrictUndefined).render(**variables)


def first_messages(task: str, uname: tuple[str, str, str, str]) -> list[dict]:
    """System and task messages; `uname` is the sandbox\'s (system, release, version, machine)."""
    system, release, version, machine = uname
    return [
        {"role": "system", "content": render(SYSTEM_TEMPLATE)},
        {
            "role": "user",
            "content": render(
                INSTANCE_TEMPLATE, task=task, system=system, release=release, version=version, machine=machine
            ),
        },
    ]


def assistant_call(arguments: str, call_id: str) -> dict:
    """The agent\'s record of one bash call, as it sends it back (LiteLLM\'s message, `extra` dropped)."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}],
    }


def observation(output: str, returncode: int, call_id: str) -> dict:
    content = render(OBSERVATION_TEMPLATE, output={"output": output, "returncode": returncode, "exception_info": ""})
    return {"role": "tool", "content": content, "tool_call_id": call_id}


def command_arguments(command: str) -> str:
    return json.dumps({"command": command})
