{{- define "agh.trainerPod" -}}
{{- $name := include "agh.name" . -}}
{{- $gpus := int .Values.trainer.gpus -}}
metadata:
  {{- include "agh.podMeta" (dict "root" . "component" "trainer" "comp" .Values.trainer) | nindent 2 }}
spec:
  restartPolicy: OnFailure
  {{- $comp := merge (dict "affinity" (include "agh.trainerAffinity" . | fromJson)) .Values.trainer }}
  {{- include "agh.podCommon" (dict "root" . "comp" $comp) | nindent 2 }}
  # Saves a checkpoint on SIGTERM before exiting (compose: TRAINER_STOP_GRACE).
  terminationGracePeriodSeconds: {{ .Values.trainer.terminationGracePeriodSeconds }}
  initContainers:
    # compose: depends_on engine and tunnel-check `service_healthy`. These headless Services resolve
    # only to pods whose readiness probes (the same health commands) pass.
    - name: ready-gate
      image: {{ include "agh.image" (dict "root" . "image" "trainer") }}
      imagePullPolicy: {{ .Values.images.pullPolicy | quote }}
      command: ["python", "-m", "guards.ready_gate", {{ printf "%s-engine-ready" $name | quote }}, {{ printf "%s-env-server-ready" $name | quote }}]
      {{- $env := include "agh.homeEnv" . }}
      env:
        {{- $env | nindent 8 }}
        {{- include "agh.extraEnv" (dict "comp" .Values.trainer "env" $env) | nindent 8 }}
      {{- include "agh.containerSecurity" (dict "root" . "comp" .Values.trainer) | nindent 6 }}
      {{- include "agh.resources" (dict "root" . "res" .Values.trainer.readyGateResources) | nindent 6 }}
      volumeMounts:
        - name: tmp
          mountPath: /tmp
        {{- include "agh.extraMounts" (dict "comp" .Values.trainer) | nindent 8 }}
  containers:
    - name: trainer
      image: {{ include "agh.image" (dict "root" . "image" "trainer") }}
      imagePullPolicy: {{ .Values.images.pullPolicy | quote }}
      {{- $env := include "agh.trainerEnv" (dict "root" . "gpus" $gpus) }}
      env:
        {{- $env | nindent 8 }}
        {{- include "agh.extraEnv" (dict "comp" .Values.trainer "env" $env) | nindent 8 }}
      # Compose's healthcheck: the run's status file is fresh and says it is moving. Readiness, not
      # liveness: compose does not restart a stuck trainer either; the status says why it is stuck.
      readinessProbe:
        exec:
          command: ["python", "-m", "trainer.watch.healthcheck"]
        periodSeconds: 30
        timeoutSeconds: 10
        failureThreshold: 2
      {{- include "agh.containerSecurity" (dict "root" . "comp" .Values.trainer) | nindent 6 }}
      {{- include "agh.resources" (dict "root" . "res" .Values.trainer.resources "gpus" $gpus) | nindent 6 }}
      volumeMounts:
        - name: bucket
          mountPath: /bucket
        - name: dshm
          mountPath: /dev/shm
        - name: tmp
          mountPath: /tmp
        {{- include "agh.extraMounts" (dict "comp" .Values.trainer) | nindent 8 }}
  volumes:
    - name: bucket
      persistentVolumeClaim:
        claimName: {{ include "agh.bucketClaim" . }}
    # Counted in the trainer container's memory (requests and limit): tmpfs pages are the pod's.
    - name: dshm
      emptyDir:
        medium: Memory
        sizeLimit: {{ .Values.trainer.shmSize | quote }}
    {{- include "agh.tmpVolume" (dict "size" .Values.trainer.tmpSize) | nindent 4 }}
    {{- include "agh.extraVolumes" (dict "comp" .Values.trainer) | nindent 4 }}
{{- end -}}
