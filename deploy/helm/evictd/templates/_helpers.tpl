{{/*
The chart's objects are the kustomize base's (files/kubernetes, files/monitoring: links to deploy/kubernetes and
deploy/monitoring), read as they are and changed only where a value says so, so that the two cannot drift.
*/}}

{{/* The labels every object of the chart carries, beside the base's app.kubernetes.io/name. */}}
{{- define "evictd.labels" -}}
app.kubernetes.io/name: evictd
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | quote }}
{{- end -}}

{{/*
The objects of one base file, as {"items": [...]}: (list $ "files/kubernetes/rbac.yaml"). The base's namespace,
evictd-system, becomes the release's wherever it is named (metadata, binding subjects, the admission policy's
service account name, the PodMonitor's namespaceSelector); the chart's labels are added.
*/}}
{{- define "evictd.baseObjects" -}}
{{- $root := index . 0 -}}
{{- $file := index . 1 -}}
{{- $text := $root.Files.Get $file -}}
{{- if not $text -}}
{{- fail (printf "the chart's %s is missing or empty (files/ links to deploy/kubernetes and deploy/monitoring)" $file) -}}
{{- end -}}
{{- $text = replace "evictd-system" $root.Release.Namespace $text -}}
{{- $objects := list -}}
{{- range regexSplit "(?m)^---[ \\t]*$" $text -1 -}}
{{- $object := fromYaml . -}}
{{- if $object.Error -}}
{{- fail (printf "%s: %s" $file $object.Error) -}}
{{- end -}}
{{- if $object.kind -}}
{{- $labels := merge (include "evictd.labels" $root | fromYaml) ($object.metadata.labels | default dict) -}}
{{- $_ := set $object.metadata "labels" $labels -}}
{{- $objects = append $objects $object -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "items" $objects) -}}
{{- end -}}

{{/* Every object of one base file as YAML documents: (list $ "files/kubernetes/rbac.yaml"). */}}
{{- define "evictd.render" -}}
{{- range (include "evictd.baseObjects" . | fromYaml).items }}
---
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* evictd's config.yaml: the config value, else the kustomize base's ConfigMap's. */}}
{{- define "evictd.config" -}}
{{- if .Values.config -}}
{{- .Values.config -}}
{{- else -}}
{{- $configMap := index (include "evictd.baseObjects" (list . "files/kubernetes/configmap.yaml") | fromYaml).items 0 -}}
{{- index $configMap.data "config.yaml" -}}
{{- end -}}
{{- end -}}

{{/* The image reference: the repository, tagged with image.tag or else the chart's appVersion. */}}
{{- define "evictd.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
