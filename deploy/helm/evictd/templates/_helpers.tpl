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

{{/* The kustomize base's config.yaml (deploy/kubernetes/configmap.yaml), as its text. */}}
{{- define "evictd.shippedConfig" -}}
{{- $configMap := index (include "evictd.baseObjects" (list . "files/kubernetes/configmap.yaml") | fromYaml).items 0 -}}
{{- index $configMap.data "config.yaml" -}}
{{- end -}}

{{/*
RFC 7386 JSON merge patch, as the kubelet applies its drop-in files: (dict "target" $map "patch" $map) changes
$map in place (nothing is returned). A map merges key by key, a null removes the key, anything else (a list too)
replaces it. A map patched onto a missing or non-map value starts from {}. The patch's maps are never put into
the target, so nothing of .Values is changed by a later patch.
*/}}
{{- define "evictd.mergePatch" -}}
{{- $target := .target -}}
{{- range $key, $value := .patch -}}
{{- if kindIs "invalid" $value -}}
{{- $_ := unset $target $key -}}
{{- else if kindIs "map" $value -}}
{{- $inner := index $target $key -}}
{{- if not (kindIs "map" $inner) -}}
{{- $inner = dict -}}
{{- $_ := set $target $key $inner -}}
{{- end -}}
{{- $_ := include "evictd.mergePatch" (dict "target" $inner "patch" $value) -}}
{{- else -}}
{{- $_ := set $target $key $value -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* One document of a config.yaml: apiVersion and kind first, then its fields (sorted). */}}
{{- define "evictd.configDocument" -}}
apiVersion: {{ .apiVersion }}
kind: {{ .kind }}
{{- with omit . "apiVersion" "kind" }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The values that refuse each other, and the pools' names, checked before anything renders.
config replaces the whole config.yaml; dryRun, eviction, settings and pools layer onto the shipped one.
*/}}
{{- define "evictd.checkValues" -}}
{{- $values := .Values -}}
{{- if $values.config -}}
{{- $layered := list -}}
{{- if eq $values.dryRun false }}{{ $layered = append $layered "dryRun=false" }}{{ end -}}
{{- if $values.eviction }}{{ $layered = append $layered "eviction" }}{{ end -}}
{{- if $values.settings }}{{ $layered = append $layered "settings" }}{{ end -}}
{{- if $values.pools }}{{ $layered = append $layered "pools" }}{{ end -}}
{{- if $layered -}}
{{- fail (printf "config replaces the whole config.yaml, and %s layer onto the shipped one: set one or the other (unset config and state your changes in dryRun, eviction, settings and pools, or write them all into config)" (join ", " $layered)) -}}
{{- end -}}
{{- end -}}
{{- $names := dict -}}
{{- range $values.pools -}}
{{- if hasKey $names .name -}}
{{- fail (printf "pools: two pools are named %q: each pool is a DaemonSet evictd-<name>" .name) -}}
{{- end -}}
{{- $_ := set $names .name true -}}
{{- end -}}
{{- end -}}

{{/*
evictd's config.yaml for the default DaemonSet (dict "root" $) or for one pool's (dict "root" $ "pool" $pool):
the config value when set; else the shipped config.yaml with, merged onto its KubeletConfiguration, eviction and
then the pool's eviction, and onto its EvictdConfiguration, settings, dryRun, then the pool's settings and dryRun.
When that changes nothing, the shipped text itself (comments and all), so the default render is the base's.
*/}}
{{- define "evictd.config" -}}
{{- $root := .root -}}
{{- $pool := .pool | default dict -}}
{{- $values := $root.Values -}}
{{- if $values.config -}}
{{- $values.config -}}
{{- else -}}
{{- $shipped := include "evictd.shippedConfig" $root -}}
{{- $documents := dict -}}
{{- range regexSplit "(?m)^---[ \\t]*$" $shipped -1 -}}
{{- $document := fromYaml . -}}
{{- if $document.Error -}}
{{- fail (printf "files/kubernetes/configmap.yaml's config.yaml: %s" $document.Error) -}}
{{- end -}}
{{- if $document.kind -}}
{{- if hasKey $documents $document.kind -}}
{{- fail (printf "files/kubernetes/configmap.yaml's config.yaml holds two %s documents: the chart layers its values onto one of each" $document.kind) -}}
{{- end -}}
{{- $_ := set $documents $document.kind $document -}}
{{- end -}}
{{- end -}}
{{- $kubelet := $documents.KubeletConfiguration -}}
{{- $evictd := $documents.EvictdConfiguration -}}
{{- if not (and $kubelet $evictd (eq (len $documents) 2)) -}}
{{- fail "files/kubernetes/configmap.yaml's config.yaml must hold one KubeletConfiguration and one EvictdConfiguration document: the chart layers eviction and settings onto them" -}}
{{- end -}}
{{- $before := toJson (list $kubelet $evictd) -}}
{{- $_ := include "evictd.mergePatch" (dict "target" $kubelet "patch" $values.eviction) -}}
{{- $_ = include "evictd.mergePatch" (dict "target" $evictd "patch" $values.settings) -}}
{{- if not (kindIs "invalid" $values.dryRun) -}}{{/* --set dryRun=null: as shipped */}}
{{- $_ = set $evictd "dryRun" $values.dryRun -}}
{{- end -}}
{{- $fleet := toJson (list $kubelet $evictd) -}}
{{- $_ = include "evictd.mergePatch" (dict "target" $kubelet "patch" ($pool.eviction | default dict)) -}}
{{- $_ = include "evictd.mergePatch" (dict "target" $evictd "patch" ($pool.settings | default dict)) -}}
{{- if not (kindIs "invalid" $pool.dryRun) -}}
{{- $_ = set $evictd "dryRun" $pool.dryRun -}}
{{- end -}}
{{- $layered := toJson (list $kubelet $evictd) -}}
{{- if eq $layered $before -}}
{{- $shipped -}}
{{- else -}}
# Rendered by the evictd chart: deploy/kubernetes/configmap.yaml's config.yaml with the values dryRun, eviction
# and settings{{ if ne $layered $fleet }}, then pool {{ $pool.name }}'s,{{ end }} merged onto it (RFC 7386, as the kubelet merges drop-ins).
# Check a change before installing it: evictd check-config --config config.yaml
{{ include "evictd.configDocument" $kubelet }}
---
{{ include "evictd.configDocument" $evictd }}
{{ end -}}
{{- end -}}
{{- end -}}

{{/* The image reference: the repository, tagged with image.tag or else the chart's appVersion. */}}
{{- define "evictd.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/*
The nodeSelectorTerms that keep a DaemonSet off the nodes of other pools: (dict "own" $nodeSelector "others"
(list $poolSelector ...)) gives {"terms": [[expression, ...], ...]}, terms ORed, expressions ANDed. A node is in a
pool when it has every label of the pool's nodeSelector; so it is outside the pool when one of them is missing or
different, which is NotIn (NotIn also matches a node without the label: no DoesNotExist needed). The terms are
"outside every other pool" multiplied out; a pool whose labels own already contradicts is left out, an expression
own already decides is dropped, and NotIn expressions on one label are joined. No other pool: [[]].
*/}}
{{- define "evictd.exclusionTerms" -}}
{{- $own := .own -}}
{{- $terms := list (list) -}}
{{- range $other := .others -}}
{{- $disjoint := false -}}
{{- range $label, $value := $other -}}
{{- if and (hasKey $own $label) (ne (index $own $label) $value) }}{{ $disjoint = true }}{{ end -}}
{{- end -}}
{{- if not $disjoint -}}
{{- $next := list -}}
{{- range $term := $terms -}}
{{- $outside := false -}}
{{- range $term -}}
{{- if and (hasKey $other .key) (eq (index $other .key) .value) }}{{ $outside = true }}{{ end -}}
{{- end -}}
{{- if $outside -}}
{{- $next = append $next $term -}}
{{- else -}}
{{- range $label := keys $other | sortAlpha -}}
{{- if not (hasKey $own $label) -}}
{{- $next = append $next (append $term (dict "key" $label "value" (index $other $label))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $terms = $next -}}
{{- end -}}
{{- end -}}
{{- $joined := list -}}
{{- range $term := $terms -}}
{{- $byLabel := dict -}}
{{- range $term -}}
{{- $_ := set $byLabel .key (append (index $byLabel .key | default list) .value | uniq | sortAlpha) -}}
{{- end -}}
{{- $expressions := list -}}
{{- range $label := keys $byLabel | sortAlpha -}}
{{- $expressions = append $expressions (dict "key" $label "operator" "NotIn" "values" (index $byLabel $label)) -}}
{{- end -}}
{{- $joined = append $joined $expressions -}}
{{- end -}}
{{- toJson (dict "terms" $joined) -}}
{{- end -}}
