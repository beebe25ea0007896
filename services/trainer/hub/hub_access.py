"""Whether the Hub token can write HUB_MODEL_ID, asked at start (guards `hub-access`, in the trainer, which
alone holds HUB_TOKEN): otherwise a read-only or foreign token is found by the push at the end of the night.

huggingface_hub 1.33.0's own calls (hf_api.py): `whoami` (GET /api/whoami-v2) names the token's user, orgs and
role; `auth_check(write=True)` (GET /api/models/{repo}/auth-check/write) answers for a repo that exists. A repo
not created yet (the trainer creates it at the first push) is judged by the namespace and the token's role.

    python -m trainer.hub.hub_access     guards' check: HUB_MODEL_ID, HUB_TOKEN, HF_ENDPOINT from the environment;
                                         the finding's one line and exit 1, else exit 0
"""

from __future__ import annotations

import sys

from stack.env import Env
from stack.readers.trainer import hub_from_env

FIX = "set HUB_TOKEN to a write token of that namespace (huggingface.co/settings/tokens), or unset HUB_MODEL_ID"


def problem(hub) -> str | None:
    """One line when the token cannot write `hub.model_id` at `hub.endpoint`, else None. A Hub that does not
    answer is not a finding here (the push retries, and scripts/publish can push later): it is printed."""
    import httpx
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError, RepositoryNotFoundError

    repo, where = hub.model_id, hub.endpoint
    api = HfApi(endpoint=where, token=hub.token or None)
    try:
        me = api.whoami()
    except LocalTokenNotFoundError:
        return f"HUB_MODEL_ID={repo} is set but there is no Hub token (HUB_TOKEN is empty, no saved login): {FIX}"
    except HfHubHTTPError as exc:
        if exc.response is not None and exc.response.status_code == 401:
            return f"HUB_TOKEN is not accepted by {where} (401 on whoami) for HUB_MODEL_ID={repo}: {FIX}"
        return _unreachable(repo, where, exc)
    except (OSError, httpx.TransportError) as exc:  # refused, DNS, timeout: the Hub did not answer
        return _unreachable(repo, where, exc)
    user = me.get("name", "?")
    namespace = repo.split("/")[0] if "/" in repo else user
    role = ((me.get("auth") or {}).get("accessToken") or {}).get("role", "")
    try:
        api.auth_check(repo, write=True)
        return None
    except RepositoryNotFoundError:
        pass  # not created yet: judged below by namespace and role
    except HfHubHTTPError as exc:
        code = exc.response.status_code if exc.response is not None else "?"
        return f"HUB_TOKEN of {user} cannot write HUB_MODEL_ID={repo} at {where} ({code} on auth-check/write): {FIX}"
    if namespace not in {user, *(org.get("name") for org in me.get("orgs") or [])}:
        return (
            f"HUB_MODEL_ID={repo} is under {namespace}, but HUB_TOKEN is {user}'s, who is not a member of it: "
            f"set HUB_MODEL_ID={user}/{repo.split('/')[-1]}, or {FIX}"
        )
    if role == "read":
        return f"HUB_TOKEN of {user} is a read token and cannot create HUB_MODEL_ID={repo}: {FIX}"
    return None


def _unreachable(repo: str, where: str, exc: Exception) -> None:
    print(
        f"trainer: could not ask {where} whether HUB_TOKEN can write HUB_MODEL_ID={repo} ({type(exc).__name__}); "
        "the push at the end will retry",
        flush=True,
    )
    return None


def main() -> int:
    """Guards runs this instead of importing the trainer: huggingface_hub and httpx are the trainer's, and stack
    (all guards imports) carries neither. A note printed on the way (a Hub that does not answer) comes out too."""
    hub = hub_from_env(Env(collect=True))  # a bad HUB_MODEL_ID is trainer-settings' line, not this check's
    if not hub.model_id:
        return 0
    line = problem(hub)
    if line:
        print(line)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
