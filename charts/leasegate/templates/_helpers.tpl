{{/* Names are fixed: the ConfigMap, the webhook configurations and the Service are leasegate's contract,
and the webhook configurations are cluster-scoped, so one release per cluster. */}}
{{- define "leasegate.name" -}}leasegate{{- end -}}
{{- define "leasegate.webhookName" -}}leasegate-webhook{{- end -}}

{{- define "leasegate.labels" -}}
app.kubernetes.io/name: leasegate-webhook
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "leasegate.selectorLabels" -}}
app.kubernetes.io/name: leasegate-webhook
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* An image: <image.registry>/<repository>:<tag>, the registry left out when empty. */}}
{{- define "leasegate.image" -}}
{{ with .root.Values.image.registry }}{{ trimSuffix "/" . }}/{{ end }}{{ .image.repository }}:{{ .image.tag | default .root.Chart.AppVersion }}
{{- end -}}

{{- define "leasegate.webhookImage" -}}
{{ include "leasegate.image" (dict "root" . "image" .Values.image.webhook) }}
{{- end -}}

{{- define "leasegate.agentImage" -}}
{{ include "leasegate.image" (dict "root" . "image" .Values.image.agent) }}
{{- end -}}

{{/* Namespaces that are never injected nor fenced. */}}
{{- define "leasegate.excludedNamespaces" -}}
{{- $ns := list "kube-system" "kube-public" "kube-node-lease" .Release.Namespace -}}
{{- concat $ns .Values.webhook.excludeNamespaces | uniq | toJson -}}
{{- end -}}

{{/* Annotations of both webhook configurations: cert-manager's CA injection, when it issues. */}}
{{- define "leasegate.webhookAnnotations" -}}
{{- if .Values.certificates.certManager.enabled -}}
annotations:
  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/{{ include "leasegate.webhookName" . }}
{{- end -}}
{{- end -}}

{{/* clientConfig of a webhook entry; $path is the server path. */}}
{{- define "leasegate.clientConfig" -}}
{{- $root := index . 0 -}}
clientConfig:
  service:
    name: {{ include "leasegate.webhookName" $root }}
    namespace: {{ $root.Release.Namespace }}
    path: {{ index . 1 }}
    port: 443
  {{- if and (not $root.Values.certificates.certManager.enabled) $root.Values.certificates.caBundle }}
  caBundle: {{ $root.Values.certificates.caBundle | b64enc }}
  {{- end }}
{{- end -}}

{{- define "leasegate.certSecret" -}}
{{- if .Values.certificates.certManager.enabled -}}
{{ include "leasegate.webhookName" . }}-tls
{{- else -}}
{{ required "certificates.existingSecret is required when certificates.certManager.enabled is false" .Values.certificates.existingSecret }}
{{- end -}}
{{- end -}}
