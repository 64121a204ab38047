{{/* Chart name. */}}
{{- define "kuik.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of every resource name; 40 characters at most so suffixes fit in 63. */}}
{{- define "kuik.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kuik.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "kuik.labels" -}}
helm.sh/chart: {{ include "kuik.chart" . }}
app.kubernetes.io/name: {{ include "kuik.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component: include with (dict "root" $ "component" "webhook"). */}}
{{- define "kuik.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kuik.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "kuik.componentLabels" -}}
{{ include "kuik.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "kuik.webhook.fullname" -}}{{ include "kuik.fullname" . }}-webhook{{- end }}
{{- define "kuik.syncer.fullname" -}}{{ include "kuik.fullname" . }}-secret-syncer{{- end }}
{{- define "kuik.webhook.tlsSecretName" -}}{{ include "kuik.fullname" . }}-webhook-tls{{- end }}
{{- define "kuik.imagePullSecretName" -}}{{ include "kuik.fullname" . }}-image-pull-secret{{- end }}
{{/* The ValidatingAdmissionPolicy and its binding: cluster-wide, so named after the release. */}}
{{- define "kuik.admissionPolicyName" -}}{{ include "kuik.fullname" . }}-secret-writes{{- end }}

{{- define "kuik.webhook.serviceAccountName" -}}
{{- default (include "kuik.webhook.fullname" .) .Values.serviceAccount.webhookName }}
{{- end }}

{{/* The secret-syncer's ServiceAccount; the admission policy embeds it in CEL string literals,
so it must be a DNS label. */}}
{{- define "kuik.syncer.serviceAccountName" -}}
{{- $name := default (include "kuik.syncer.fullname" .) .Values.serviceAccount.syncerName }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" $name) }}
{{- fail (printf "the secret-syncer ServiceAccount name %q must be a DNS label" $name) }}
{{- end }}
{{- $name }}
{{- end }}

{{/* image reference of a component: include with (dict "root" $ "image" .Values.webhook.image). */}}
{{- define "kuik.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) }}
{{- end }}

{{/*
imagePullSecrets of a pod: the chart-created Secret, the chart-wide list, then the component's
own list, without duplicates. Include with (dict "root" $ "image" .Values.webhook.image);
renders nothing when the list is empty.
*/}}
{{- define "kuik.imagePullSecrets" -}}
{{- $names := list }}
{{- if .root.Values.imagePullSecret.create }}
{{- $names = append $names (include "kuik.imagePullSecretName" .root) }}
{{- end }}
{{- range (concat .root.Values.imagePullSecrets .image.pullSecrets) }}
{{- if kindIs "map" . }}
{{- $names = append $names .name }}
{{- else }}
{{- $names = append $names . }}
{{- end }}
{{- end }}
{{- with (uniq $names) }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/* Anti-affinity spreading one component's replicas over nodes, unless affinity is set. */}}
{{- define "kuik.affinity" -}}
{{- if .affinity }}
affinity:
  {{- toYaml .affinity | nindent 2 }}
{{- else if .spread }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "kuik.selectorLabels" (dict "root" .root "component" .component) | nindent 14 }}
{{- end }}
{{- end }}
