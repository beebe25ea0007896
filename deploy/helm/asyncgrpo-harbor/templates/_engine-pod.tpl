{{- define "agh.enginePod" -}}
{{- $c := .Values.config -}}
{{- $gpus := include "agh.engineGpus" . | int -}}
metadata:
  {{- include "agh.podMeta" (dict "root" . "component" "engine" "comp" .Values.engine) | nindent 2 }}
spec:
  restartPolicy: Never
  {{- include "agh.podCommon" (dict "root" . "comp" .Values.engine) | nindent 2 }}
  initContainers:
    # preflight: the same guard code as compose's preflight service (`python -m guards`, trainer
    # image), before the model download starts: bucket mount, GPUs, credentials, settings.
    - name: preflight
      image: {{ include "agh.image" (dict "root" . "image" "trainer") }}
      imagePullPolicy: {{ .Values.images.pullPolicy | quote }}
      command: ["python", "-m", "guards"]
      {{- $env := include "agh.preflightEnv" (dict "root" . "gpus" $gpus) }}
      env:
        {{- $env | nindent 8 }}
        {{- include "agh.extraEnv" (dict "comp" .Values.engine "env" $env) | nindent 8 }}
      {{- include "agh.containerSecurity" (dict "root" . "comp" .Values.engine) | nindent 6 }}
      {{- include "agh.resources" (dict "root" . "res" .Values.engine.preflightResources "gpus" $gpus) | nindent 6 }}
      volumeMounts:
        - name: bucket
          mountPath: /bucket
        - name: tmp
          mountPath: /tmp
        {{- include "agh.extraMounts" (dict "comp" .Values.engine) | nindent 8 }}
  containers:
    - name: engine
      image: {{ include "agh.image" (dict "root" . "image" "engine") }}
      imagePullPolicy: {{ .Values.images.pullPolicy | quote }}
      {{- $env := include "agh.engineEnv" . }}
      env:
        {{- $env | nindent 8 }}
        {{- include "agh.extraEnv" (dict "comp" .Values.engine "env" $env) | nindent 8 }}
      ports:
        - name: http
          containerPort: {{ $c.ENGINE_PORT }}
      # Compose's healthcheck: a probe that demands token ids and processed logprobs, not /health.
      startupProbe:
        exec:
          command: ["python3", "-m", "engine.probe"]
        periodSeconds: 15
        timeoutSeconds: 30
        failureThreshold: {{ div (int .Values.engine.startupSeconds) 15 }}
      readinessProbe:
        exec:
          command: ["python3", "-m", "engine.probe"]
        periodSeconds: 15
        timeoutSeconds: 30
        failureThreshold: 5
      {{- include "agh.containerSecurity" (dict "root" . "comp" .Values.engine) | nindent 6 }}
      {{- include "agh.resources" (dict "root" . "res" .Values.engine.resources "gpus" $gpus) | nindent 6 }}
      volumeMounts:
        - name: bucket
          mountPath: /bucket
        - name: dshm
          mountPath: /dev/shm
        - name: tmp
          mountPath: /tmp
        {{- include "agh.extraMounts" (dict "comp" .Values.engine) | nindent 8 }}
  volumes:
    - name: bucket
      persistentVolumeClaim:
        claimName: {{ include "agh.bucketClaim" . }}
    # Counted in the engine container's memory (requests and limit): tmpfs pages are the pod's.
    - name: dshm
      emptyDir:
        medium: Memory
        sizeLimit: {{ .Values.engine.shmSize | quote }}
    {{- include "agh.tmpVolume" (dict "size" .Values.engine.tmpSize) | nindent 4 }}
    {{- include "agh.extraVolumes" (dict "comp" .Values.engine) | nindent 4 }}
{{- end -}}
