{{/* Chart name, truncated to 63 characters. */}}
{{- define "decor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: RELEASE-decor unless the release name already contains the chart name. */}}
{{- define "decor.fullname" -}}
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

{{/* Labels on every object. */}}
{{- define "decor.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "decor.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: decor
{{- end }}

{{/* Labels that select the operator pod. */}}
{{- define "decor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "decor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The ServiceAccount the operator runs as. */}}
{{- define "decor.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "decor.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Whether the operator watches nodes and every pod: planner.watchNodes, or "auto". */}}
{{- define "decor.watchNodes" -}}
{{- if eq (toString .Values.planner.watchNodes) "auto" -}}
{{- if eq .Values.watchNamespace "" }}true{{ else }}false{{ end -}}
{{- else -}}
{{- .Values.planner.watchNodes -}}
{{- end -}}
{{- end }}
