{{/* Names: <release>-<component>, short enough for the longest suffix ("-env-server-ready"). */}}
{{- define "agh.name" -}}{{ .Release.Name | trunc 40 | trimSuffix "-" }}{{- end -}}

{{- define "agh.labels" -}}
app.kubernetes.io/name: asyncgrpo-harbor
app.kubernetes.io/instance: {{ .root.Release.Name | quote }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/managed-by: {{ .root.Release.Service | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | quote }}
{{- end -}}

{{/* What NetworkPolicies and Services select on: release + component, nothing that changes on upgrade. */}}
{{- define "agh.selector" -}}
app.kubernetes.io/instance: {{ .root.Release.Name | quote }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Every user string reaches a manifest through `quote` or `toYaml`, never bare: a newline in a value
must stay inside that value, not become a field (tests/unit/helm/test_hostile_values.py). */}}
{{- define "agh.image" -}}
{{ printf "%sasyncgrpo-harbor/%s:%s" .root.Values.images.registry .image .root.Values.images.tag | quote }}
{{- end -}}

{{- define "agh.pullSecrets" -}}
{{- with .Values.images.pullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . | quote }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* One `- name: X value: "..."` per config key, in the order given, stringified as compose passes them. */}}
{{- define "agh.configEnv" -}}
{{- $config := .root.Values.config -}}
{{- range .names }}
- name: {{ . }}
  value: {{ index $config . | toString | quote }}
{{- end }}
{{- end -}}

{{/* A key of the user's Secret; optional ones are simply absent when the Secret lacks them. */}}
{{- define "agh.secretEnv" -}}
- name: {{ .key }}
  valueFrom:
    secretKeyRef:
      name: {{ .root.Values.secret.name | quote }}
      key: {{ .key }}
      optional: {{ .optional }}
{{- end -}}

{{- define "agh.bucketClaim" -}}
{{ .Values.bucket.existingClaim | default (printf "%s-bucket" (include "agh.name" .)) | quote }}
{{- end -}}

{{- define "agh.engineGpus" -}}
{{ mul (int .Values.config.ENGINE_TENSOR_PARALLEL_SIZE) (int .Values.config.ENGINE_DATA_PARALLEL_SIZE) }}
{{- end -}}

{{- define "agh.namedTunnel" -}}
{{- if and (eq .Values.config.TUNNEL_PROVIDER "cloudflared") .Values.config.TUNNEL_HOSTNAME -}}1{{- end -}}
{{- end -}}

{{/*
The run name, fixed for the life of the release: a pod restart or `helm upgrade` must resume the same run,
not start a new one. config.RUN_NAME wins; otherwise the name recorded in the release's ConfigMap at
install (read back with `lookup` on upgrade); otherwise a fresh one in the trainer's own format
(stack/readers/trainer.py fresh_run_name: model, harness, steps, UTC stamp, 6 hex digits;
tests/unit/helm checks the two agree).
*/}}
{{- define "agh.runName" -}}
{{- /* Computed once per render and kept in .Values (one map for every template of this chart), so NOTES
prints the name the ConfigMap holds: a second evaluation would draw a new stamp and suffix. */ -}}
{{- if not (hasKey .Values "_agh_runName") -}}
{{- $_ := set .Values "_agh_runName" (include "agh.freshOrKeptRunName" .) -}}
{{- end -}}
{{- get .Values "_agh_runName" -}}
{{- end -}}

{{- define "agh.freshOrKeptRunName" -}}
{{- $config := .Values.config -}}
{{- if $config.RUN_NAME -}}
{{ $config.RUN_NAME }}
{{- else -}}
{{- $existing := lookup "v1" "ConfigMap" .Release.Namespace (printf "%s-run" (include "agh.name" .)) -}}
{{- if and $existing $existing.data $existing.data.RUN_NAME -}}
{{ $existing.data.RUN_NAME }}
{{- else -}}
{{- $model := regexReplaceAll "[^A-Za-z0-9.]+" (splitList "/" (trimSuffix "/" $config.MODEL) | last) "-" | trimAll "-" | lower | default "model" -}}
{{- $harness := regexReplaceAll "[^A-Za-z0-9.]+" (splitList ":" $config.HARNESS | last) "-" | trimAll "-" | lower | default "harness" -}}
{{- $stamp := dateInZone "20060102T150405Z" (now) "UTC" -}}
{{ printf "%s-%s-%vsteps-%s-%s" $model $harness $config.MAX_STEPS $stamp (randAlphaNum 32 | sha256sum | trunc 6) }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Refusals the schema cannot express, each one line that names the fix (rendered before anything else). */}}
{{- define "agh.validate" -}}
{{- $c := .Values.config -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" .Release.Name) -}}
{{- fail (printf "release name %q cannot name this chart's Services: use lowercase letters, digits and '-', starting with a letter (DNS-1035)" .Release.Name) -}}
{{- end -}}
{{- include "agh.validateBucket" . -}}
{{- range $name := splitList "," $c.TASK_ENV_ALLOW -}}
{{- $name = trim $name -}}
{{- if regexMatch "(?i)(^|_)(TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|CREDENTIALS|AUTH|COOKIE)S?(_|$)" $name -}}
{{- fail (printf "config.TASK_ENV_ALLOW names %s, which looks like a secret: tasks run model-written code, and whatever they may read leaves with it; remove it from TASK_ENV_ALLOW" $name) -}}
{{- end -}}
{{- end -}}
{{- if not (or .Values.bucket.existingClaim .Values.bucket.storageClassName) -}}
{{- fail "the bucket is not set: give bucket.existingClaim (a ReadWriteMany PVC you made, or one bound to a CSI object-store driver) or bucket.storageClassName (a ReadWriteMany class; the chart makes the PVC and keeps it on uninstall)" -}}
{{- end -}}
{{- if and (gt (int .Values.trainer.gpus) 1) (not $c.TRAIN_SCRIPT) -}}
{{- fail (printf "trainer.gpus=%v needs a TRAIN_SCRIPT that starts a distributed launcher (accelerate launch): the canonical trainer is one process and wraps a model seeing several GPUs in DataParallel, which fails (README, Past one host)" .Values.trainer.gpus) -}}
{{- end -}}
{{- if lt (int $c.MAX_CONCURRENT_ENVS) (int $c.MAX_INFLIGHT_ROLLOUTS) -}}
{{- fail (printf "config.MAX_CONCURRENT_ENVS=%v is below config.MAX_INFLIGHT_ROLLOUTS=%v: each in-flight rollout holds one env session; raise MAX_CONCURRENT_ENVS" $c.MAX_CONCURRENT_ENVS $c.MAX_INFLIGHT_ROLLOUTS) -}}
{{- end -}}
{{- if $c.DIRECT_URL -}}
{{- fail "config.DIRECT_URL is for TUNNEL_PROVIDER=direct, which this chart refuses (nothing outside the release may reach the capture port but through the tunnel): leave it empty" -}}
{{- end -}}
{{- if and $c.TUNNEL_HOSTNAME (ne $c.TUNNEL_PROVIDER "cloudflared") -}}
{{- fail (printf "config.TUNNEL_HOSTNAME is set but config.TUNNEL_PROVIDER=%s: a named tunnel is cloudflared's; unset TUNNEL_HOSTNAME or use cloudflared" $c.TUNNEL_PROVIDER) -}}
{{- end -}}
{{- $ports := list (int $c.ENGINE_PORT) (int $c.ENV_SERVER_PORT) (int $c.CAPTURE_PORT) (int $c.TUNNEL_METRICS_PORT) -}}
{{- if ne (len ($ports | uniq)) 4 -}}
{{- fail "config.ENGINE_PORT, ENV_SERVER_PORT, CAPTURE_PORT and TUNNEL_METRICS_PORT must all differ: give each service its own port" -}}
{{- end -}}
{{- if ge (float64 $c.TUNNEL_CHECK_TIMEOUT_S) (float64 $c.TUNNEL_CHECK_INTERVAL_S) -}}
{{- fail (printf "config.TUNNEL_CHECK_TIMEOUT_S=%v must be below config.TUNNEL_CHECK_INTERVAL_S=%v: one check must end before the next starts" $c.TUNNEL_CHECK_TIMEOUT_S $c.TUNNEL_CHECK_INTERVAL_S) -}}
{{- end -}}
{{- if ge (int $c.ENV_SERVER_SHUTDOWN_GRACE_S) (int .Values.envServer.terminationGracePeriodSeconds) -}}
{{- fail (printf "config.ENV_SERVER_SHUTDOWN_GRACE_S=%v must be below envServer.terminationGracePeriodSeconds=%v, or the kubelet kills the env server before its sandboxes are closed" $c.ENV_SERVER_SHUTDOWN_GRACE_S .Values.envServer.terminationGracePeriodSeconds) -}}
{{- end -}}
{{- /* The trials folder is an emptyDir of envServer.trialsSize: a TRIALS_MAX_GB (GiB, env_server/trials.py) at or
past it is a cap retention never reaches before the kubelet evicts the pod. Units per GiB, as Kubernetes reads a
quantity (schema: the pattern of trialsSize). */ -}}
{{- $trialsSize := toString .Values.envServer.trialsSize -}}
{{- $trialsNumber := regexFind "^[0-9]+(\\.[0-9]+)?" $trialsSize -}}
{{- $perGiB := dict "Ki" 0.00000095367431640625 "Mi" 0.0009765625 "Gi" 1.0 "Ti" 1024.0 "Pi" 1048576.0 "Ei" 1073741824.0 "k" 0.000000931322574615479 "M" 0.000931322574615479 "G" 0.931322574615479 "T" 931.322574615479 "P" 931322.574615479 "E" 931322574.615479 -}}
{{- $trialsGiB := mulf (float64 $trialsNumber) (get $perGiB (trimPrefix $trialsNumber $trialsSize)) -}}
{{- if ge (float64 $c.TRIALS_MAX_GB) $trialsGiB -}}
{{- fail (printf "config.TRIALS_MAX_GB=%v must be below envServer.trialsSize=%s (%.1f GiB, the trials emptyDir's sizeLimit), or the kubelet evicts the env server before retention holds the folders to the cap: lower TRIALS_MAX_GB or raise envServer.trialsSize" (toString $c.TRIALS_MAX_GB) $trialsSize $trialsGiB) -}}
{{- end -}}
{{- end -}}

{{/*
compose's x-guard-env and x-train-env: preflight gets both (it checks every trainer setting with the
trainer's own reader), the trainer gets both. `.gpus`: the GPUs this pod must see.
*/}}
{{- define "agh.guardEnv" -}}
{{- $name := include "agh.name" .root -}}
{{ include "agh.configEnv" (dict "root" .root "names" (list "BUCKET_NOT_A_MOUNT_OK" "SANDBOX" "TUNNEL_PROVIDER" "MODEL" "DATASETS" "TASK_INSTRUCTION_MAX_CHARS" "DATASET_BAD_TASKS" "ENGINE_PORT" "ENV_SERVER_PORT" "CAPTURE_PORT" "TUNNEL_METRICS_PORT" "TRAIN_SCRIPT" "MIN_FREE_DISK_GB" "AGENT_STEP_LIMIT" "WEIGHT_TRANSFER" "CHECKPOINT_ROOT")) | trim }}
- name: DEPLOYMENT
  value: kubernetes
- name: BUCKET_DIR
  value: /bucket
- name: HF_HOME
  value: /bucket/hf-home
# This pod's GPUs: the device plugin must have given it every one it asked for.
- name: REQUIRED_GPUS
  value: {{ .gpus | quote }}
- name: RUN_NAME
  valueFrom:
    configMapKeyRef:
      name: {{ $name }}-run
      key: RUN_NAME
{{- end -}}

{{- define "agh.trainEnv" -}}
{{- $name := include "agh.name" .root -}}
{{- $c := .root.Values.config -}}
{{ include "agh.configEnv" (dict "root" .root "names" (list "HARNESS" "AGENT_TIMEOUT_S" "REWARD_KEY" "TOOL_EFFICIENCY_BONUS" "MAX_STEPS" "NUM_GENERATIONS" "MAX_INFLIGHT_ROLLOUTS" "LEARNING_RATE" "LR_SCHEDULER" "TEMPERATURE" "TOKEN_BUDGET" "ENGINE_MAX_MODEL_LEN" "TRAINER_COMPILE_LAYERS" "PER_DEVICE_TRAIN_BATCH_SIZE" "GRADIENT_ACCUMULATION_STEPS" "TRAIN_DTYPE" "WEIGHT_SYNC_TIMEOUT_S" "SAVE_STEPS" "SAVE_TOTAL_LIMIT" "REPORT_TO" "EVAL_STEPS" "EVAL_DATASETS" "EVAL_ATTEMPTS" "EVAL_PASS_K" "EVAL_TEMPERATURE" "EVAL_TOP_P" "EVAL_MAX_TASKS" "EVAL_CONCURRENCY" "EVAL_BASELINE" "SCREENED_TASKS" "TRACKIO_SPACE_ID" "WANDB_PROJECT" "STOP_FORKING_FRAC" "STOP_UNSCORABLE_FRAC" "STOP_ZERO_SPREAD_FRAC" "STOP_STALE_FRAC" "STOP_MISMATCH_KL" "MAX_STALENESS" "STOP_WINDOW_STEPS" "TRAINER_STALE_S" "HUB_MODEL_ID" "HUB_PUSH_CHECKPOINTS" "HUB_PRIVATE" "HUB_PUSH_ATTEMPTS" "HUB_RETRY_S" "HUB_FINAL_WAIT_S" "HF_ENDPOINT")) | trim }}
- name: ENGINE_URL
  value: "http://{{ $name }}-engine:{{ $c.ENGINE_PORT }}"
- name: ENV_SERVER_URL
  value: "http://{{ $name }}-env-server:{{ $c.ENV_SERVER_PORT }}"
- name: MAX_OUTPUT_TOKENS
  value: {{ $c.MAX_OUTPUT_TOKENS | toString | quote }}
{{- end -}}

{{/*
compose's x-nccl-env, for the engine and the trainer. The transport settings keep compose's values; the
rendezvous cannot: the two are different pods (different hostnames, so NCCL uses its network transport),
and each states its own pod address (vLLM's get_ip() reads VLLM_HOST_IP on both sides, TRL 1.16.0's
master_address is the trainer's). NCCL's sockets use the pod's interface: `^lo` excludes loopback.
*/}}
{{- define "agh.ncclEnv" -}}
{{ include "agh.configEnv" (dict "root" .root "names" (list "NCCL_P2P_DISABLE" "NCCL_CUMEM_ENABLE" "NCCL_DEBUG" "NCCL_DEBUG_SUBSYS")) | trim }}
- name: VLLM_HOST_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: NCCL_SOCKET_IFNAME
  value: "^lo"
{{- end -}}

{{/*
Pod Security "restricted" (README, Pod Security): the pod's half. The global podSecurity, with the
component's own keys over it; a key set to null globally is left out (OpenShift assigns the UID itself).
`.comp`: the component's values (engine, envServer, cloudflared, trainer).
*/}}
{{- define "agh.podSecurityValues" -}}
{{- /* Key by key, not sprig's merge: merge keeps the global value over a component's `false`. */ -}}
{{- $ps := deepCopy .root.Values.podSecurity -}}
{{- range $key, $value := (default (dict) .comp.podSecurity) }}
{{- $_ := set $ps $key $value }}
{{- end }}
{{- toJson $ps -}}
{{- end -}}

{{- define "agh.podSecurity" -}}
{{- $ps := include "agh.podSecurityValues" . | fromJson -}}
{{- /* Root only by name: a pod of this chart runs model-written code's neighbours and the bucket's writers. */ -}}
{{- if and (or (eq (toString $ps.runAsNonRoot) "false") (eq (toString $ps.runAsUser) "0")) (ne (toString $ps.allowRunAsRoot) "true") }}
{{- fail (printf "podSecurity would run this pod as root (runAsNonRoot=%v, runAsUser=%v): use a non-root UID, or set podSecurity.allowRunAsRoot: true where root is meant" $ps.runAsNonRoot $ps.runAsUser) }}
{{- end }}
securityContext:
  {{- if kindIs "bool" $ps.runAsNonRoot }}
  runAsNonRoot: {{ $ps.runAsNonRoot }}
  {{- end }}
  {{- range $key := list "runAsUser" "runAsGroup" "fsGroup" }}
  {{- if kindIs "float64" (get $ps $key) }}
  {{ $key }}: {{ get $ps $key | int64 }}
  {{- else if kindIs "int64" (get $ps $key) }}
  {{ $key }}: {{ get $ps $key }}
  {{- else if kindIs "int" (get $ps $key) }}
  {{ $key }}: {{ get $ps $key }}
  {{- end }}
  {{- end }}
  {{- with $ps.fsGroupChangePolicy }}
  fsGroupChangePolicy: {{ . | quote }}
  {{- end }}
  {{- with $ps.supplementalGroups }}
  supplementalGroups:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  seccompProfile:
    type: {{ $ps.seccompProfile | default "RuntimeDefault" | quote }}
    {{- if eq $ps.seccompProfile "Localhost" }}
    localhostProfile: {{ $ps.localhostProfile | quote }}
    {{- end }}
{{- end -}}

{{/* The container's half: fixed, not values. Nothing this chart runs needs a capability, privilege or
escalation; readOnlyRootFilesystem is the one switch (writable paths are emptyDirs). */}}
{{- define "agh.containerSecurity" -}}
{{- $ps := include "agh.podSecurityValues" . | fromJson -}}
securityContext:
  privileged: false
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: {{ ne $ps.readOnlyRootFilesystem false }}
  capabilities:
    drop: [ALL]
{{- end -}}

{{/* The pod spec fields every workload shares: identity, scheduling, security, pull secrets. */}}
{{- define "agh.podCommon" -}}
{{- $v := .root.Values -}}
automountServiceAccountToken: false
# Service links would add <SERVICE>_PORT=tcp://... variables next to ours (ENGINE_PORT and friends).
enableServiceLinks: false
{{- with $v.serviceAccountName }}
serviceAccountName: {{ . | quote }}
{{- end }}
{{- with .comp.runtimeClassName }}
runtimeClassName: {{ . | quote }}
{{- end }}
{{- with .comp.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{ include "agh.podSecurity" . }}
{{- include "agh.pullSecrets" .root }}
{{- with .comp.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .comp.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .comp.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Pod template metadata: the chart's labels (stable across upgrades: nothing here names a version, so a
Job's immutable template does not change with the chart), then the user's. */}}
{{- define "agh.podMeta" -}}
labels:
  {{- include "agh.selector" . | nindent 2 }}
  app.kubernetes.io/name: asyncgrpo-harbor
  {{- with .comp.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .comp.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
The user's extraEnv after the chart's variables. `.env`: the container's env block as rendered; a name
the chart already sets is refused (two values for one name: the later one silently wins).
*/}}
{{- define "agh.extraEnv" -}}
{{- $env := .env -}}
{{- range .comp.extraEnv }}
{{- if regexMatch (printf "(?m)^- name: %s$" .name) $env }}
{{- fail (printf "extraEnv sets %s, which the chart already sets for this container: use the chart's value (config.%s or the matching key) instead" .name .name) }}
{{- end }}
{{- if and (hasKey . "value") (regexMatch "(?i)(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$" .name) }}
{{- fail (printf "extraEnv sets %s as a plain value, and its name says it holds a secret (plain values land in the pod spec, readable by anyone who may read pods): keep it in a Secret and use valueFrom.secretKeyRef" .name) }}
{{- end }}
{{- end }}
{{- with .comp.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* A writable /tmp (and HOME in it): the root filesystem is read-only and the UID has no home. */}}
{{- define "agh.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .size | quote }}
{{- end -}}

{{/* Variables for a UID with no /etc/passwd entry: HOME for caches (vLLM, Triton, FlashInfer, Hugging
Face's token cache), USER because getpass.getuser() raises without it (Python 3.13, checked in the trainer
image as UID 10001) and libraries name cache folders after it. */}}
{{- define "agh.homeEnv" -}}
- name: HOME
  value: /tmp
- name: USER
  value: asyncgrpo
{{- end -}}

{{- define "agh.extraMounts" -}}
{{- with .comp.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "agh.extraVolumes" -}}
{{- with .comp.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* A container's resources: the values' requests and limits, plus the GPUs (`.gpus`, limits only: the
request of an extended resource defaults to its limit, so the two cannot differ). */}}
{{- define "agh.resources" -}}
{{- $res := deepCopy (default (dict) .res) -}}
{{- if .gpus -}}
{{- $_ := set $res "limits" (merge (dict .root.Values.gpuResource .gpus) (default (dict) (get $res "limits"))) -}}
{{- end -}}
{{- with $res }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "agh.preflightEnv" -}}
{{ include "agh.guardEnv" (dict "root" .root "gpus" .gpus) }}
{{ include "agh.trainEnv" (dict "root" .root) }}
{{ include "agh.configEnv" (dict "root" .root "names" (list "TUNNEL_HOSTNAME" "CAPTURE_MAX_BODY_MB" "CAPTURE_MAX_CONCURRENT" "TASK_ENV_ALLOW" "DIRECT_URL" "MAX_CONCURRENT_ENVS" "AGENT_INSTALL" "ENV_SERVER_SHUTDOWN_GRACE_S" "GRADIO_SHARE_SERVER" "TUNNEL_CHECK_INTERVAL_S" "TUNNEL_CHECK_FAILURES_TO_WITHDRAW" "TUNNEL_CHECK_TIMEOUT_S" "TRIALS_KEEP" "TRIALS_MAX_GB")) | trim }}
# env-server's and tunnel-check's settings, checked here by their own readers (guards/checks.py), with the
# values those pods get: the capture proxy binds its pod's address (this pod's stands in for it).
- name: CAPTURE_HOST
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{ include "agh.captureHostOptOut" . }}
- name: STACK_NAME
  value: {{ .root.Values.config.STACK_NAME | default (include "agh.stackName" .root) | quote }}
- name: TRIALS_DIR
  value: /var/lib/asyncgrpo-harbor/trials
{{ include "agh.secretEnv" (dict "root" .root "key" "E2B_API_KEY" "optional" false) }}
{{ include "agh.secretEnv" (dict "root" .root "key" "TUNNEL_TOKEN" "optional" (not (include "agh.namedTunnel" .root))) | trim }}
{{ include "agh.homeEnv" . }}
{{- end -}}

{{- define "agh.engineEnv" -}}
{{ include "agh.configEnv" (dict "root" . "names" (list "MODEL" "ENGINE_PORT" "ENGINE_MAX_MODEL_LEN" "ENGINE_GPU_MEMORY_UTILIZATION" "ENGINE_TENSOR_PARALLEL_SIZE" "ENGINE_DATA_PARALLEL_SIZE" "ENGINE_DTYPE" "TOOL_CALL_PARSER" "REASONING_PARSER" "CHAT_TEMPLATE_KWARGS" "TURN_END_TOKENS" "CHAT_TEMPLATE_FIX" "TURN_CHAIN_CHECK" "ENGINE_EXTRA_ARGS" "ENGINE_LOGPROBS_UNPROVEN_OK" "WEIGHT_TRANSFER")) | trim }}
- name: DEPLOYMENT
  value: kubernetes
# The pod's own address (no wildcard); the NetworkPolicies decide who gets in.
- name: ENGINE_HOST
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: HF_HOME
  value: /bucket/hf-home
{{ include "agh.ncclEnv" (dict "root" .) }}
# The pause/resume/weight-update routes TRL's AsyncGRPO calls exist only in dev mode.
- name: VLLM_SERVER_DEV_MODE
  value: "1"
{{ include "agh.secretEnv" (dict "root" . "key" "HF_TOKEN" "optional" true) }}
{{ include "agh.homeEnv" . }}
{{- end -}}

{{- define "agh.trainerEnv" -}}
{{ include "agh.guardEnv" (dict "root" .root "gpus" .gpus) }}
{{ include "agh.trainEnv" (dict "root" .root) }}
- name: PYTORCH_CUDA_ALLOC_CONF
  value: expandable_segments:True
{{ include "agh.ncclEnv" (dict "root" .root) }}
{{ include "agh.secretEnv" (dict "root" .root "key" "HF_TOKEN" "optional" true) }}
{{ include "agh.secretEnv" (dict "root" .root "key" "HUB_TOKEN" "optional" true) }}
{{ include "agh.secretEnv" (dict "root" .root "key" "WANDB_API_KEY" "optional" true) }}
{{ include "agh.homeEnv" . }}
{{- end -}}

{{/* The pod's address is not loopback, and cloudflared is another pod: the chart binds the capture proxy
beyond the tunnel on purpose, and its NetworkPolicies admit only cloudflared and the trainer to it. */}}
{{- define "agh.captureHostOptOut" -}}
- name: CAPTURE_HOST_BEYOND_TUNNEL_OK
  value: "publish-the-capture-proxy-beyond-the-tunnel"
{{- end -}}

{{- define "agh.envServerEnv" -}}
{{- $name := include "agh.name" . -}}
{{- $c := .Values.config -}}
{{ include "agh.configEnv" (dict "root" . "names" (list "ENV_SERVER_PORT" "CAPTURE_PORT" "MODEL" "DATASETS" "EVAL_DATASETS" "TASK_INSTRUCTION_MAX_CHARS" "DATASET_BAD_TASKS" "SANDBOX" "MAX_OUTPUT_TOKENS" "MAX_CONCURRENT_ENVS" "MAX_INFLIGHT_ROLLOUTS" "TUNNEL_PROVIDER" "AGENT_INSTALL" "CAPTURE_MAX_BODY_MB" "CAPTURE_MAX_CONCURRENT" "TASK_ENV_ALLOW" "DIRECT_URL" "TRIALS_KEEP" "TRIALS_MAX_GB")) | trim }}
# Unique per namespace and release: env-server reaps the E2B sandboxes named after it at start, so two
# releases of one name in two namespaces on one E2B key must not share it.
- name: STACK_NAME
  value: {{ $c.STACK_NAME | default (include "agh.stackName" .) | quote }}
# The pod's own address (never a wildcard: the env server refuses one for the capture proxy).
# The trainer reaches the Task API and cloudflared the capture proxy through Services; the
# NetworkPolicies admit exactly those two.
- name: ENV_SERVER_HOST
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: CAPTURE_HOST
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{ include "agh.captureHostOptOut" . }}
- name: ENGINE_URL
  value: "http://{{ $name }}-engine:{{ $c.ENGINE_PORT }}"
- name: TRIALS_DIR
  value: /var/lib/asyncgrpo-harbor/trials
- name: HANDOFF_DIR
  value: /handoff
- name: ENV_SERVER_SHUTDOWN_GRACE_S
  value: {{ $c.ENV_SERVER_SHUTDOWN_GRACE_S | toString | quote }}
- name: WHEELHOUSE_DIR
  value: /wheelhouse
{{ include "agh.secretEnv" (dict "root" . "key" "E2B_API_KEY" "optional" false) }}
{{ include "agh.secretEnv" (dict "root" . "key" "OPENENV_CAPTURE_ADMIN_KEY" "optional" true) }}
{{ include "agh.secretEnv" (dict "root" . "key" "HF_TOKEN" "optional" true) }}
{{ include "agh.homeEnv" . }}
{{- end -}}

{{- define "agh.tunnelCheckEnv" -}}
{{- $name := include "agh.name" . -}}
{{ include "agh.configEnv" (dict "root" . "names" (list "TUNNEL_PROVIDER" "TUNNEL_HOSTNAME" "TUNNEL_METRICS_PORT" "DIRECT_URL" "GRADIO_SHARE_SERVER" "CAPTURE_PORT" "TUNNEL_CHECK_INTERVAL_S" "TUNNEL_CHECK_FAILURES_TO_WITHDRAW" "TUNNEL_CHECK_TIMEOUT_S")) | trim }}
# "1" for a named tunnel: tunnel-check knows one is configured without holding the token.
- name: TUNNEL_NAMED
  value: {{ include "agh.namedTunnel" . | quote }}
# The proxy in this pod, at the address it binds.
- name: CAPTURE_HOST
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
# cloudflared runs in its own pod; its metrics server (GET /quicktunnel) names the URL.
- name: TUNNEL_METRICS_HOST
  value: {{ printf "%s-cloudflared-metrics" $name | quote }}
- name: HANDOFF_DIR
  value: /handoff
{{ include "agh.homeEnv" . }}
{{- end -}}

{{/* The capture proxy as the tunnel reaches it: the Service's cluster DNS name. A named tunnel's route at
Cloudflare must be exactly this URL. */}}
{{- define "agh.captureURL" -}}
{{ printf "http://%s-capture.%s.svc.cluster.local:%v" (include "agh.name" .) .Release.Namespace .Values.config.CAPTURE_PORT }}
{{- end -}}

{{/*
A Job's pod template is immutable. Its hash is recorded on the Job; on `helm upgrade` (lookup reads the
live Job; `helm template` has no cluster and reads nothing) a different template is refused with the one
command that makes the upgrade possible, instead of the API server's "field is immutable".
*/}}
{{- define "agh.podTemplateHash" -}}
{{- $hash := sha256sum .pod | trunc 16 -}}
{{- $live := lookup "batch/v1" "Job" .root.Release.Namespace .job -}}
{{- if $live -}}
{{- $was := get (default (dict) $live.metadata.annotations) "asyncgrpo-harbor/pod-template" -}}
{{- if and $was (ne $was $hash) -}}
{{- fail (printf "the Job %s runs another pod template (a value it uses changed) and a Job's template is immutable: kubectl -n %s delete job %s --wait (a trainer saves its checkpoint on SIGTERM; the new Job resumes the same run name), then run the upgrade again" .job .root.Release.Namespace .job) -}}
{{- end -}}
{{- end -}}
asyncgrpo-harbor/pod-template: {{ $hash | quote }}
{{- end -}}

{{- define "agh.stackName" -}}
{{ printf "%s-%s" (.Release.Name | trunc 33 | trimSuffix "-") (printf "%s/%s" .Release.Namespace .Release.Name | sha256sum | trunc 6) }}
{{- end -}}

{{/*
The bucket's storage rule: ReadWriteMany, or one node for both pods. An existing claim is read back
(lookup; at install and upgrade, not under `helm template`) so a claim that cannot be shared is refused
before any pod waits on Multi-Attach.
*/}}
{{- define "agh.validateBucket" -}}
{{- $b := .Values.bucket -}}
{{- with $b.existingClaim -}}
{{- $claim := lookup "v1" "PersistentVolumeClaim" $.Release.Namespace . -}}
{{- if $claim -}}
{{- $modes := default (list) $claim.spec.accessModes -}}
{{- if and (eq $b.accessMode "ReadWriteMany") (not (has "ReadWriteMany" $modes)) -}}
{{- fail (printf "bucket.existingClaim %s is %s, not ReadWriteMany: engine and trainer would mount it from different nodes (Multi-Attach). Use a ReadWriteMany claim, or set bucket.accessMode=ReadWriteOnce to run the trainer on the engine's node" . (join "," $modes)) -}}
{{- end -}}
{{- if and (eq $b.accessMode "ReadWriteOnce") (has "ReadWriteOncePod" $modes) -}}
{{- fail (printf "bucket.existingClaim %s is ReadWriteOncePod: only one pod may ever mount it, and the engine and the trainer both do. Use a ReadWriteMany or ReadWriteOnce claim" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (eq $b.accessMode "ReadWriteOnce") .Values.trainer.affinity.podAffinity -}}
{{- fail "bucket.accessMode=ReadWriteOnce places the trainer on the engine's node with a podAffinity of its own; trainer.affinity.podAffinity would replace it: set nodeAffinity or podAntiAffinity only" -}}
{{- end -}}
{{- end -}}

{{/* The trainer's affinity: the user's, plus the engine's node when the bucket is ReadWriteOnce. */}}
{{- define "agh.trainerAffinity" -}}
{{- $aff := deepCopy (default (dict) .Values.trainer.affinity) -}}
{{- if eq .Values.bucket.accessMode "ReadWriteOnce" -}}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "agh.selector" (dict "root" . "component" "engine") | fromYaml)) -}}
{{- $_ := set $aff "podAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term)) -}}
{{- end -}}
{{- toJson $aff -}}
{{- end -}}
