{{/*
The chart's name, or nameOverride.
*/}}
{{- define "erpsync.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's objects' name: the release name, with the chart's name unless it already holds it
(release "erpsync" makes objects named "erpsync", as deploy/kubernetes/ does).
*/}}
{{- define "erpsync.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The migration's and the verification's names. A CronJob's name may be 52 characters long at
most (its Jobs add 11).
*/}}
{{- define "erpsync.migrateName" -}}
{{- printf "%s-migrate" (include "erpsync.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{- define "erpsync.verifyName" -}}
{{- printf "%s-verify" (include "erpsync.fullname" . | trunc 45 | trimSuffix "-") }}
{{- end }}

{{- define "erpsync.configName" -}}
{{- printf "%s-config" (include "erpsync.fullname" . | trunc 56 | trimSuffix "-") }}
{{- end }}

{{/*
The chart's name and version, for the helm.sh/chart label.
*/}}
{{- define "erpsync.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The labels a component's pods are selected by; called with (dict "root" $ "component" NAME). The
component keeps the replicas (daemon), the migration and the verification apart: the
Deployment, the Service and the PodDisruptionBudget select the daemon's pods only.
*/}}
{{- define "erpsync.selectorLabels" -}}
app.kubernetes.io/name: {{ include "erpsync.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
Every object's labels; called as erpsync.selectorLabels.
*/}}
{{- define "erpsync.labels" -}}
helm.sh/chart: {{ include "erpsync.chart" .root }}
{{ include "erpsync.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: erpsync
{{- end }}

{{/*
The image every container runs.
*/}}
{{- define "erpsync.image" -}}
image: {{ printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) | quote }}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}

{{/*
The runtime role's Secret: the one named in secret.existingSecret, else the chart's.
*/}}
{{- define "erpsync.secretName" -}}
{{- .Values.secret.existingSecret | default (include "erpsync.fullname" .) }}
{{- end }}

{{/*
The owner's Secret, read by the migration Job only. The chart's own is a hook, and Helm deletes
whatever has a hook's name before it makes it: its name is not deploy/kubernetes/'s
erpsync-migrate, which may be a Secret of the user's.
*/}}
{{- define "erpsync.migrateSecretName" -}}
{{- .Values.migration.secret.existingSecret | default (printf "%s-owner" (include "erpsync.fullname" . | trunc 57 | trimSuffix "-")) }}
{{- end }}

{{/*
The value of a key of a Secret the chart makes; fails, naming the value to set, when it is
missing. Called with (dict "secret" VALUES "path" "secret" "key" KEY).
*/}}
{{- define "erpsync.secretValue" -}}
{{- $value := index (.secret.stringData | default dict) .key | default "" | toString }}
{{- if not $value }}
{{- fail (printf "%s.stringData.%s is required: the chart makes the Secret from it. Set it (--set or --set-file), or name a Secret you made in %s.existingSecret" .path .key .path) }}
{{- end }}
{{- $value }}
{{- end }}

{{/*
The configuration's secret files under /etc/erpsync/secret/ that secret.fileKeys does not mount:
installing fails, naming them, rather than replicas that cannot read their password.
*/}}
{{- define "erpsync.checkSecretFiles" -}}
{{- $dir := "/etc/erpsync/secret/" }}
{{- range $i, $source := .Values.config.sources }}
{{- $logins := prepend ($source.logins | default list) $source }}
{{- range $login := $logins }}
{{- range $setting := list "password_file" "client_secret_file" }}
{{- $path := get $login $setting | default "" | toString }}
{{- if and (hasPrefix $dir $path) (not (has (trimPrefix $dir $path) $.Values.secret.fileKeys)) }}
{{- $where := printf "config.sources[%d]" $i }}
{{- with $source.name }}{{ $where = printf "%s (%s)" $where . }}{{ end }}
{{- fail (printf "%s: %s is %s, but secret.fileKeys does not list %q: add it there (and to the Secret)" $where $setting $path (trimPrefix $dir $path)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
A container's environment: the chart's own variables (.own, a YAML list), then the values' env
and extraEnv (the replicas' and the verification's). A variable named twice fails the install:
Kubernetes would take the last, and an upgrade's patch may keep either.
Called with (dict "root" $ "own" (include ...)).
*/}}
{{- define "erpsync.env" -}}
{{- $seen := list }}
{{- $extra := list }}
{{- range $name, $value := .root.Values.env }}
{{- $extra = append $extra (dict "name" $name "value" ($value | toString)) }}
{{- end }}
{{- range concat (fromYamlArray .own) $extra .root.Values.extraEnv }}
{{- if has .name $seen }}
{{- fail (printf "env and extraEnv: %s is set twice, or is one the chart sets itself (see values.yaml)" .name) }}
{{- end }}
{{- $seen = append $seen .name }}
{{- end }}
{{- .own }}
{{- with $extra }}
{{ toYaml . }}
{{- end }}
{{- with .root.Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The volume that holds /etc/erpsync/erpsync.yaml and /etc/erpsync/secret/<key>: one projected
volume instead of a Secret mounted inside a ConfigMap mount (nested mounts into a read-only
volume are fragile, and unlike subPath mounts both files still follow updates of their sources).
*/}}
{{- define "erpsync.configVolume" -}}
- name: config
  projected:
    defaultMode: 0440
    sources:
      - configMap:
          name: {{ include "erpsync.configName" . }}
          items:
            - key: erpsync.yaml
              path: erpsync.yaml
      - secret:
          name: {{ include "erpsync.secretName" . }}
          items:
            {{- range .Values.secret.fileKeys }}
            - key: {{ . }}
              path: secret/{{ . }}
            {{- end }}
{{- end }}

{{/*
Pod settings every pod of the chart shares (securityContext apart: the migration's has no
volume, hence no fsGroup).
*/}}
{{- define "erpsync.podSettings" -}}
# erpsync never calls the Kubernetes API: no token in the pod.
automountServiceAccountToken: false
# No *_SERVICE_HOST variables: they would only clutter the environment erpsync reads.
enableServiceLinks: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
