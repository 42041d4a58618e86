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

{{/*
The namespaces the operator serves, as a JSON list (read it with fromJsonArray): the names in
watchNamespaces (a list, or one comma-separated string) and the deprecated watchNamespace,
each once; [] serves all namespaces. Fails on a name that is not a namespace's.
*/}}
{{- define "decor.watchNamespaces" -}}
{{- $given := .Values.watchNamespaces | default list }}
{{- if kindIs "string" $given }}{{ $given = splitList "," $given }}{{ end }}
{{- $names := list }}
{{- range (append $given (.Values.watchNamespace | default "")) }}
{{- $name := trim (toString .) }}
{{- if $name }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" $name) }}
{{- fail (printf "watchNamespaces: %q is not a namespace name (lowercase letters, digits and '-', at most 63 characters)" $name) }}
{{- end }}
{{- $names = append $names $name | uniq }}
{{- end }}
{{- end }}
{{- toJson $names }}
{{- end }}

{{/* Whether the install serves all namespaces ("true") or a list of them (""). */}}
{{- define "decor.clusterwide" -}}
{{- if eq (include "decor.watchNamespaces" .) "[]" }}true{{ end }}
{{- end }}

{{/* Whether the operator may read the CRD to check its revision: rbac.checkCRD, or "auto"
(on for a cluster-wide install; a namespaced one holds no cluster-scoped object for it). */}}
{{- define "decor.checkCRD" -}}
{{- if eq (toString .Values.rbac.checkCRD) "auto" -}}
{{- if include "decor.clusterwide" . }}true{{ else }}false{{ end -}}
{{- else -}}
{{- .Values.rbac.checkCRD -}}
{{- end -}}
{{- end }}

{{/* Whether the operator watches nodes and every pod: planner.watchNodes, or "auto". */}}
{{- define "decor.watchNodes" -}}
{{- if eq (toString .Values.planner.watchNodes) "auto" -}}
{{- if include "decor.clusterwide" . }}true{{ else }}false{{ end -}}
{{- else -}}
{{- .Values.planner.watchNodes -}}
{{- end -}}
{{- end }}

{{/* The operator's rules on jobs, pods and the rest: a ClusterRole's, or a Role's in each
namespace served (rbac.yaml says why each is needed). */}}
{{- define "decor.operatorRules" -}}
- apiGroups: [decor.dev]
  resources: [deadlinetrainingjobs]
  verbs: [list, watch]
- apiGroups: [decor.dev]
  resources: [deadlinetrainingjobs/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete]
- apiGroups: [""]
  resources: [pods/resize]
  verbs: [patch]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
- apiGroups: [""]
  resources: [services]
  verbs: [get, create]
- apiGroups: [""]
  resources: [limitranges]
  verbs: [list]
{{- if eq .Values.trainer.scrapeVia "apiserver" }}
- apiGroups: [""]
  resources: [pods/proxy]
  verbs: [get]
{{- end }}
{{- if eq .Values.trainer.checkpoint.volume "claim" }}
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [create, get]
{{- end }}
{{- end }}
