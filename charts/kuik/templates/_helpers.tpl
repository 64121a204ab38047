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
{{- define "kuik.keeper.fullname" -}}{{ include "kuik.fullname" . }}-keeper{{- end }}
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

{{- define "kuik.keeper.serviceAccountName" -}}
{{- default (include "kuik.keeper.fullname" .) .Values.serviceAccount.keeperName }}
{{- end }}

{{/*
The controller kinds whose stuck pods the secret-syncer may evict, Kind.group, as a JSON list (a
CEL list literal too): syncer.recreateStuckPods.owners, plus Job.batch with
syncer.recreateStuckPods.jobs. The syncer is given the same list (--recreate-stuck-pod-owners,
--recreate-stuck-job-pods) as the pod-deletes policy.
*/}}
{{- define "kuik.syncer.recreateOwners" -}}
{{- $owners := .Values.syncer.recreateStuckPods.owners -}}
{{- if .Values.syncer.recreateStuckPods.jobs }}{{ $owners = append $owners "Job.batch" }}{{ end -}}
{{- toJson $owners -}}
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

{{/*
Provider credentials (credentialProviders): on when a configuration is given, inline or as an
existing ConfigMap. "true" or empty.
*/}}
{{- define "kuik.credentialProviders.enabled" -}}
{{- with .Values.credentialProviders }}
{{- if or .config .existingConfigMap }}true{{ end }}
{{- end }}
{{- end }}

{{/* The webhook reads the configuration too: the nodes run the same providers. */}}
{{- define "kuik.credentialProviders.webhook" -}}
{{- if and (include "kuik.credentialProviders.enabled" .) .Values.credentialProviders.sameAsNodes }}true{{ end }}
{{- end }}

{{- define "kuik.credentialProviders.configMapName" -}}
{{- default (printf "%s-credential-providers" (include "kuik.fullname" .)) .Values.credentialProviders.existingConfigMap }}
{{- end }}

{{/* Key of the ConfigMap holding the configuration. */}}
{{- define "kuik.credentialProviders.configKey" -}}
{{- if .Values.credentialProviders.existingConfigMap }}{{ .Values.credentialProviders.existingConfigMapKey }}{{ else }}config.yaml{{ end }}
{{- end }}

{{/* Where both components read the configuration. */}}
{{- define "kuik.credentialProviders.configDir" -}}/etc/kuik/credential-providers{{- end }}
{{- define "kuik.credentialProviders.configFile" -}}
{{- include "kuik.credentialProviders.configDir" . }}/{{ include "kuik.credentialProviders.configKey" . }}
{{- end }}

{{/* The inline configuration as the file the kubelet reads, apiVersion and kind filled in. */}}
{{- define "kuik.credentialProviders.configDocument" -}}
{{- $doc := merge (deepCopy .Values.credentialProviders.config) (dict "apiVersion" "kubelet.config.k8s.io/v1" "kind" "CredentialProviderConfig") }}
{{- toYaml $doc }}
{{- end }}

{{/* The plugin image reference: repository[:tag][@digest]. */}}
{{- define "kuik.credentialProviders.image" -}}
{{- with .Values.credentialProviders.binDir.image }}
{{- .repository }}{{ with .tag }}:{{ . }}{{ end }}{{ with .digest }}@{{ . }}{{ end }}
{{- end }}
{{- end }}

{{/* The secret-syncer's --image-credential-provider-bin-dir. */}}
{{- define "kuik.credentialProviders.binDir" -}}
{{- $b := .Values.credentialProviders.binDir }}
{{- if and $b.image.repository (eq $b.image.mode "imageVolume") }}
{{- clean (printf "/kuik/credential-provider-image/%s" $b.image.path) }}
{{- else }}/kuik/credential-provider-bin{{ end }}
{{- end }}

{{/*
The refusals of credentialProviders the schema cannot word clearly (and that hold even with
--skip-schema-validation). Renders nothing.
*/}}
{{- define "kuik.credentialProviders.check" -}}
{{- $c := .Values.credentialProviders }}
{{- $b := $c.binDir }}
{{- if and $c.config $c.existingConfigMap }}
{{- fail "credentialProviders.config and credentialProviders.existingConfigMap are exclusive: set one" }}
{{- end }}
{{- if include "kuik.credentialProviders.enabled" . }}
{{- if and $b.hostPath $b.image.repository }}
{{- fail "credentialProviders.binDir.hostPath and credentialProviders.binDir.image.repository are exclusive: set exactly one plugin source" }}
{{- end }}
{{- if not (or $b.hostPath $b.image.repository) }}
{{- fail "credentialProviders.config or credentialProviders.existingConfigMap needs the plugin binaries: set credentialProviders.binDir.hostPath or credentialProviders.binDir.image.repository" }}
{{- end }}
{{- if and $c.existingConfigMap (not $c.existingConfigMapKey) }}
{{- fail "credentialProviders.existingConfigMapKey must name the key of credentialProviders.existingConfigMap holding the configuration" }}
{{- end }}
{{- if $b.image.repository }}
{{- if not (or $b.image.tag $b.image.digest) }}
{{- fail "credentialProviders.binDir.image needs a tag or a digest" }}
{{- end }}
{{- if not (has $b.image.mode (list "imageVolume" "initContainer")) }}
{{- fail (printf "credentialProviders.binDir.image.mode %q: want imageVolume or initContainer" $b.image.mode) }}
{{- end }}
{{- if not (isAbs $b.image.path) }}
{{- fail (printf "credentialProviders.binDir.image.path %q must be absolute" $b.image.path) }}
{{- end }}
{{- if and (eq $b.image.mode "imageVolume") (semverCompare "<1.33.0-0" .Capabilities.KubeVersion.Version) }}
{{- fail (printf "credentialProviders.binDir.image.mode imageVolume needs Kubernetes 1.33 or later (image volumes are on by default from 1.35), not %s: use mode initContainer" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- if and (eq $b.image.mode "initContainer") (eq (clean $b.image.path) "/") }}
{{- fail "credentialProviders.binDir.image.path must name the image's plugin directory, not /, with mode initContainer (everything below it is copied)" }}
{{- end }}
{{- end }}
{{- else }}
{{- if or $b.hostPath $b.image.repository }}
{{- fail "credentialProviders.binDir is set but there is no configuration: set credentialProviders.config or credentialProviders.existingConfigMap, or unset credentialProviders.binDir" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The configuration volume of both Deployments (a list item). */}}
{{- define "kuik.credentialProviders.configVolume" -}}
- name: credential-provider-config
  configMap:
    name: {{ include "kuik.credentialProviders.configMapName" . }}
    items:
      - key: {{ include "kuik.credentialProviders.configKey" . }}
        path: {{ include "kuik.credentialProviders.configKey" . }}
{{- end }}

{{- define "kuik.credentialProviders.configMount" -}}
- name: credential-provider-config
  mountPath: {{ include "kuik.credentialProviders.configDir" . }}
  readOnly: true
{{- end }}

{{/* Pod annotation restarting both components when the inline configuration changes. */}}
{{- define "kuik.credentialProviders.checksum" -}}
{{- if .Values.credentialProviders.config }}
kuik.enix.io/credential-providers-checksum: {{ include "kuik.credentialProviders.configDocument" . | sha256sum }}
{{- end }}
{{- end }}

{{/* The extra CAs (caBundle): "true" when set; fails on a PEM that holds no certificate. */}}
{{- define "kuik.caBundle.enabled" -}}
{{- with .Values.caBundle }}
{{- if and .pem .configMap.name }}
{{- fail "caBundle.pem and caBundle.configMap.name are exclusive" }}
{{- end }}
{{- if and .pem (not (contains "-----BEGIN CERTIFICATE-----" .pem)) }}
{{- fail "caBundle.pem holds no PEM certificate (-----BEGIN CERTIFICATE-----)" }}
{{- end }}
{{- if or .pem .configMap.name }}true{{- end }}
{{- end }}
{{- end }}

{{- define "kuik.caBundle.configMapName" -}}
{{- default (printf "%s-ca-bundle" (include "kuik.fullname" .)) .Values.caBundle.configMap.name }}
{{- end }}

{{/* The extra CAs as one file of /etc/ssl/certs, beside the images' bundle (a subPath mount
leaves the directory's other files in place). */}}
{{- define "kuik.caBundle.mount" -}}
{{- if include "kuik.caBundle.enabled" . }}
- name: ca-bundle
  mountPath: /etc/ssl/certs/kuik-extra-ca.crt
  subPath: kuik-extra-ca.crt
  readOnly: true
{{- end }}
{{- end }}

{{- define "kuik.caBundle.volume" -}}
{{- if include "kuik.caBundle.enabled" . }}
- name: ca-bundle
  configMap:
    name: {{ include "kuik.caBundle.configMapName" . }}
    items:
      - key: {{ ternary "ca.crt" .Values.caBundle.configMap.key (not .Values.caBundle.configMap.name) }}
        path: kuik-extra-ca.crt
{{- end }}
{{- end }}

{{/* Pod annotation rolling both components when caBundle.pem changes (a subPath mount is not
updated in place). */}}
{{- define "kuik.caBundle.checksum" -}}
{{- if and (include "kuik.caBundle.enabled" .) .Values.caBundle.pem }}
kuik.enix.io/ca-bundle-checksum: {{ .Values.caBundle.pem | sha256sum }}
{{- end }}
{{- end }}
