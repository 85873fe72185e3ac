{{/*
Names. The operator is one per cluster (cluster-scoped Skyhooks, one leader Lease), so object
names do not depend on the release name: with the defaults every name is the one deploy/ uses
(`skyhook-operator`, `skyhook-operator-metrics`, `skyhook-plugin-user`,
`skyhook-default-limits`), which the plugin's `debug collect` and deploy/README.md expect.
fullnameOverride renames everything (the e2e tests install beside deploy/ that way).
*/}}
{{- define "skyhook.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "skyhook.fullname" -}}
{{- default (include "skyhook.name" .) .Values.fullnameOverride | trunc 55 | trimSuffix "-" }}
{{- end }}

{{/* `skyhook` for `skyhook-operator`: the prefix of the plugin-user roles and the LimitRange. */}}
{{- define "skyhook.prefix" -}}
{{- include "skyhook.fullname" . | trimSuffix "-operator" }}
{{- end }}

{{- define "skyhook.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object: deploy/'s `app.kubernetes.io/name`, plus Helm's own. */}}
{{- define "skyhook.labels" -}}
app.kubernetes.io/name: {{ include "skyhook.name" . }}
{{ include "skyhook.helmLabels" . }}
{{- end }}

{{/* The labels Helm adds to what deploy/ has (the e2e comparison ignores exactly these). */}}
{{- define "skyhook.helmLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "skyhook.chart" . }}
{{- end }}

{{/* The operator pods' selector, as deploy/ (immutable once installed). */}}
{{- define "skyhook.selectorLabels" -}}
app.kubernetes.io/name: {{ include "skyhook.name" . }}
control-plane: controller-manager
{{- end }}

{{/* The operator's version, as `kubectl skyhook version` reads it from the version label. */}}
{{- define "skyhook.version" -}}
{{- default .Chart.AppVersion .Values.controllerManager.manager.image.tag }}
{{- end }}

{{/* repository[:tag][@digest]; the digest selects the image when set. */}}
{{- define "skyhook.image" -}}
{{- $tag := .tag | default .defaultTag -}}
{{- .repository }}{{ if $tag }}:{{ $tag }}{{ end }}{{ if .digest }}@{{ .digest }}{{ end }}
{{- end }}

{{- define "skyhook.operatorImage" -}}
{{- $i := .Values.controllerManager.manager.image -}}
{{- $defaultTag := "" -}}
{{- if not $i.digest }}{{ $defaultTag = .Chart.AppVersion }}{{ end -}}
{{- include "skyhook.image" (dict "repository" $i.repository "tag" $i.tag "digest" $i.digest "defaultTag" $defaultTag) }}
{{- end }}

{{- define "skyhook.agentImage" -}}
{{- $a := .Values.controllerManager.manager.agent -}}
{{- include "skyhook.image" (dict "repository" $a.repository "tag" $a.tag "digest" $a.digest "defaultTag" "") }}
{{- end }}

{{/* The port number of a Go-style bind address (":8080", "0.0.0.0:8080"). */}}
{{- define "skyhook.port" -}}
{{- splitList ":" (toString .) | last | int }}
{{- end }}

{{/*
The operator's requests and limits, unless controllerManager.manager.resources is set.
Sized from the operator's measured peak resident memory (docs/performance.md, 2026-11-27):
12.8-14.2 MiB at 100 nodes x 4 packages, 21.9-26.2 MiB at 1,000 x 4, 29.4 MiB at 2,000 x 4 and
54.0 MiB at 5,000 x 4, all below 16 MiB plus 3 KiB per (node, package), counting at least 4
packages per node (part of the cost is per node):
  units       = estimatedNodeCount * max(estimatedPackageCount, 4)
  peak        = 16 + 0.003 * units                      (MiB, an upper bound of the peak RSS)
  memory      request max(64, 1.5 * peak) Mi, limit max(256, 3 * peak) Mi
  cpu         request max(100, 0.01 * units) m, limit max(1000, 4 * request) m
(110-135 millicores were measured on average from 1,000 to 5,000 nodes: the API server sets the
pace.)
*/}}
{{- define "skyhook.resources" -}}
{{- if .Values.controllerManager.manager.resources -}}
{{- toYaml .Values.controllerManager.manager.resources }}
{{- else -}}
{{- $units := mulf (float64 .Values.estimatedNodeCount) (maxf (float64 .Values.estimatedPackageCount) 4.0) -}}
{{- $peak := addf 16.0 (mulf 0.003 $units) -}}
{{- $cpu := maxf 100.0 (ceil (mulf 0.01 $units)) -}}
requests:
  cpu: {{ $cpu | int }}m
  memory: {{ maxf 64.0 (ceil (mulf 1.5 $peak)) | int }}Mi
limits:
  cpu: {{ maxf 1000.0 (mulf 4.0 $cpu) | int }}m
  memory: {{ maxf 256.0 (ceil (mulf 3.0 $peak)) | int }}Mi
{{- end }}
{{- end }}

{{/* Where the operator (and the cleanup hook) may run. With "spread", replicas prefer different
nodes (upstream chart v0.20, delta D50): a node drained or rebooted takes one replica, not both. */}}
{{- define "skyhook.placement" -}}
{{- $spread := .spread -}}
{{- with .root -}}
affinity:
  {{- if $spread }}
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "skyhook.selectorLabels" . | nindent 14 }}
  {{- end }}
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - key: kubernetes.io/os
              operator: In
              values: [linux]
            {{- with .Values.controllerManager.nodeAffinity.matchExpressions }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
{{- with .Values.controllerManager.selectors }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.controllerManager.schedulerName }}
schedulerName: {{ . }}
{{- end }}
{{- with .Values.controllerManager.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .Values.imagePullSecret }}
imagePullSecrets:
  - name: {{ .Values.imagePullSecret }}
{{- end }}
{{- end }}
{{- end }}

{{/* The Skyhooks (and DeploymentPolicies) the cleanup hook deletes: kubectl's "-l", "<selector>" or --all. */}}
{{- define "skyhook.cleanupScope" -}}
{{- $sel := .Values.cleanup.selector | default .Values.controllerManager.manager.env.skyhookSelector -}}
{{- if $sel }}"-l", {{ $sel | quote }}{{ else }}--all{{ end }}
{{- end }}
