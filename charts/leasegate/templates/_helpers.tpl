{{/* Names are fixed: the ConfigMap, the webhook configurations and the Service are leasegate's contract,
and the webhook configurations are cluster-scoped, so one release per cluster. */}}
{{- define "leasegate.name" -}}leasegate{{- end -}}
{{- define "leasegate.webhookName" -}}leasegate-webhook{{- end -}}

{{- define "leasegate.labels" -}}
app.kubernetes.io/name: leasegate-webhook
app.kubernetes.io/instance: {{ .Release.Name }}
{{ include "leasegate.commonLabels" . }}
{{- end -}}

{{/* The labels of every object but for its name and instance: the release's, then commonLabels (which
cannot replace these, nor any selector's). */}}
{{- define "leasegate.commonLabels" -}}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- with omit .Values.commonLabels "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/version" "app.kubernetes.io/managed-by" "helm.sh/chart" }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "leasegate.selectorLabels" -}}
app.kubernetes.io/name: leasegate-webhook
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* An image: <registry>/<repository>:<tag>, the registry left out when empty, and @<digest> when
set: the runtime pulls by digest, and the tag stays for people reading. */}}
{{- define "leasegate.image" -}}
{{ with .registry }}{{ trimSuffix "/" . }}/{{ end }}{{ .image.repository }}:{{ .image.tag | default .root.Chart.AppVersion }}{{ with .image.digest }}@{{ . }}{{ end }}
{{- end -}}

{{- define "leasegate.webhookImage" -}}
{{ include "leasegate.image" (dict "root" . "registry" .Values.image.registry "image" .Values.image.webhook) }}
{{- end -}}

{{- define "leasegate.agentImage" -}}
{{ include "leasegate.image" (dict "root" . "registry" .Values.image.registry "image" .Values.image.agent) }}
{{- end -}}

{{/* Where leasegate's releases are published: image.registry's default. */}}
{{- define "leasegate.publishedRegistry" -}}ghcr.io/leasegate{{- end -}}

{{/* The helm test image: from tests.image.registry if set; else from image.registry when that is not
where releases are published (a mirror, which then holds the test image too); else from docker.io. */}}
{{- define "leasegate.testImage" -}}
{{- $registry := .Values.tests.image.registry -}}
{{- if not $registry -}}
{{- $mirror := .Values.image.registry | trimSuffix "/" -}}
{{- $registry = ternary "docker.io" $mirror (or (not $mirror) (eq $mirror (include "leasegate.publishedRegistry" .))) -}}
{{- end -}}
{{ include "leasegate.image" (dict "root" . "registry" $registry "image" .Values.tests.image) }}
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
  {{- if not $root.Values.certificates.certManager.enabled }}
  caBundle: {{ $root.Values.certificates.caBundle | b64enc }}
  {{- end }}
{{- end -}}

{{- define "leasegate.certSecret" -}}
{{- if .Values.certificates.certManager.enabled -}}
{{ include "leasegate.webhookName" . }}-tls
{{- else -}}
{{- $secret := required "certificates.existingSecret is required when certificates.certManager.enabled is false: the name of a kubernetes.io/tls Secret in the release namespace for leasegate-webhook.<namespace>.svc, with certificates.caBundle the CA that signed it" .Values.certificates.existingSecret -}}
{{- if not .Values.certificates.caBundle -}}
{{- fail "certificates.caBundle is empty: with certificates.existingSecret (certManager.enabled=false) the webhook configurations need the PEM CA bundle that signed that Secret's certificate, or the API server trusts none of leasegate's answers and every opted-in pod's creation fails; set certificates.caBundle (e.g. --set-file certificates.caBundle=ca.crt), or use cert-manager" -}}
{{- end -}}
{{ $secret }}
{{- end -}}
{{- end -}}
