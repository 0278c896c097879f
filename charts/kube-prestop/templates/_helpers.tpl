{{/* Name of the chart, overridable. */}}
{{- define "kube-prestop.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name; names the Deployment, Service, webhook configuration... */}}
{{- define "kube-prestop.fullname" -}}
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

{{- define "kube-prestop.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kube-prestop.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kube-prestop.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kube-prestop.labels" -}}
helm.sh/chart: {{ include "kube-prestop.chart" . }}
{{ include "kube-prestop.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kube-prestop
{{- end }}

{{- define "kube-prestop.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kube-prestop.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Secret holding the serving certificate, in every mode. */}}
{{- define "kube-prestop.tlsSecretName" -}}
{{- if eq .Values.certificates.mode "provided" }}
{{- required "certificates.provided.secretName is required in provided mode" .Values.certificates.provided.secretName }}
{{- else }}
{{- printf "%s-tls" (include "kube-prestop.fullname" .) }}
{{- end }}
{{- end }}

{{- define "kube-prestop.webhookImage" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "kube-prestop.installImage" -}}
{{- printf "%s:%s" .Values.installImage.repository (default .Chart.AppVersion .Values.installImage.tag) }}
{{- end }}

{{/* Where the serving certificate files are, in the container. */}}
{{- define "kube-prestop.certDir" -}}
/var/run/kube-prestop/certs
{{- end }}

{{/* Ports the webhook listens on: the node's with hostNetwork, else the pod's. */}}
{{- define "kube-prestop.httpsPort" -}}
{{- if .Values.hostNetwork.enabled }}{{ .Values.hostNetwork.port }}{{ else }}{{ .Values.server.port }}{{ end }}
{{- end }}

{{- define "kube-prestop.metricsPort" -}}
{{- if .Values.hostNetwork.enabled }}{{ .Values.hostNetwork.metricsPort }}{{ else }}{{ .Values.server.metricsPort }}{{ end }}
{{- end }}

{{/* Namespaces never injected nor written into: kube-system, the release
namespace and webhook.excludedNamespaces. */}}
{{- define "kube-prestop.excludedNamespaces" -}}
{{- join "," (concat (list "kube-system" .Release.Namespace) .Values.webhook.excludedNamespaces) }}
{{- end }}

{{/* The webhook configuration's namespaceSelector as a label selector
(--namespace-selector): the only namespaces where the webhook creates its
sidecar-binary ConfigMaps. */}}
{{- define "kube-prestop.namespaceSelector" -}}
kube-prestop.io/inject=enabled,kubernetes.io/metadata.name notin ({{ include "kube-prestop.excludedNamespaces" . }})
{{- end }}

{{/* The outcome exporter's objects: their own name and selector labels, so
that the webhook's Service, PodDisruptionBudget, NetworkPolicy and
ServiceMonitor never select its pod or Service. */}}
{{- define "kube-prestop.outcomesName" -}}
{{- printf "%s-outcomes" (include "kube-prestop.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kube-prestop.outcomesSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-outcomes" (include "kube-prestop.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kube-prestop.outcomesLabels" -}}
helm.sh/chart: {{ include "kube-prestop.chart" . }}
{{ include "kube-prestop.outcomesSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kube-prestop
app.kubernetes.io/component: outcomes
{{- end }}
