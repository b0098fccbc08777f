{{/* Names and labels shared by every object of the chart. */}}
{{- define "fakegpu.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "fakegpu.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "fakegpu.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fakegpu.serviceAccountName" -}}
{{- default (include "fakegpu.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The driver name: explicit, else NVIDIA's when compatible, else fakegpu's own. */}}
{{- /* The NIC plugin's DRA driver name: nics.driverName, else nic.fakegpu.dev. */ -}}
{{- define "fakegpu.nicDriverName" -}}
{{- .Values.nics.driverName | default "nic.fakegpu.dev" -}}
{{- end -}}

{{- define "fakegpu.driverName" -}}
{{- if .Values.driverName -}}
{{- .Values.driverName -}}
{{- else if .Values.nvidiaCompatible -}}
gpu.nvidia.com
{{- else -}}
gpu.fakegpu.dev
{{- end -}}
{{- end -}}

{{/* MIG class name: mig.nvidia.com beside gpu.nvidia.com, else mig.<driver domain>. */}}
{{- define "fakegpu.migClassName" -}}
{{- $driver := include "fakegpu.driverName" . -}}
{{- printf "mig.%s" (regexReplaceAll "^gpu\\." $driver "") -}}
{{- end -}}

{{/* The GPU DeviceClass's extended resource name (DRAExtendedResource): <driver domain>/gpu. */}}
{{- define "fakegpu.extendedResourceName" -}}
{{- $driver := include "fakegpu.driverName" . -}}
{{- printf "%s/gpu" (regexReplaceAll "^gpu\\." $driver "") -}}
{{- end -}}

{{/* The driver's domain (nvidia.com, fakegpu.dev): ComputeDomains are resource.<domain>. */}}
{{- define "fakegpu.driverDomain" -}}
{{- regexReplaceAll "^gpu\\." (include "fakegpu.driverName" .) "" -}}
{{- end -}}

{{/*
The resource.k8s.io version to write DeviceClasses with: the value, else the newest the
cluster serves. `helm template` without a cluster knows the versions of Helm's own client
libraries; pass --api-versions (or resourceApiVersion) to render for another cluster.
*/}}
{{- define "fakegpu.resourceApiVersion" -}}
{{- if .Values.resourceApiVersion -}}
{{- .Values.resourceApiVersion -}}
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1/DeviceClass" -}}
resource.k8s.io/v1
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1beta2/DeviceClass" -}}
resource.k8s.io/v1beta2
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1beta1/DeviceClass" -}}
resource.k8s.io/v1beta1
{{- else -}}
{{- fail "the cluster serves no resource.k8s.io version with DeviceClass (is DRA enabled?); set resourceApiVersion to render anyway" -}}
{{- end -}}
{{- end -}}

{{/*
One of the manifests shared with the embedded provider (files/*.yaml, see files/README.md):
its ${...} placeholders filled, each object given the chart's labels. Called with
(list $ "<file name>"). A placeholder the chart does not know, or a document that is not YAML,
fails the render.
*/}}
{{- define "fakegpu.shared" -}}
{{- $root := index . 0 -}}
{{- $path := printf "files/%s" (index . 1) -}}
{{- $text := $root.Files.Get $path -}}
{{- if not $text -}}
{{- fail (printf "%s is missing from the chart" $path) -}}
{{- end -}}
{{- $values := dict
      "${NAME}" (include "fakegpu.fullname" $root)
      "${NAMESPACE}" $root.Release.Namespace
      "${SERVICE_ACCOUNT}" (include "fakegpu.serviceAccountName" $root)
      "${DRIVER}" (include "fakegpu.driverName" $root)
      "${MIG_CLASS}" (include "fakegpu.migClassName" $root)
      "${EXTENDED_RESOURCE}" (include "fakegpu.extendedResourceName" $root)
      "${DOMAIN}" (include "fakegpu.driverDomain" $root)
      "${NIC_DRIVER}" (include "fakegpu.nicDriverName" $root) -}}
{{- if contains "${RESOURCE_API}" $text -}}
{{- $_ := set $values "${RESOURCE_API}" (include "fakegpu.resourceApiVersion" $root) -}}
{{- end -}}
{{- range $key, $value := $values -}}
{{- $text = replace $key $value $text -}}
{{- end -}}
{{- with regexFind "\\$\\{[A-Za-z_]*\\}" $text -}}
{{- fail (printf "%s: unknown placeholder %s" $path .) -}}
{{- end -}}
{{- $labels := include "fakegpu.labels" $root | fromYaml -}}
{{- range $doc := regexSplit "(?m)^---[ \\t]*$" $text -1 -}}
{{- $obj := fromYaml $doc -}}
{{- if hasKey $obj "Error" -}}
{{- fail (printf "%s: %s" $path $obj.Error) -}}
{{- end -}}
{{- if $obj }}
---
{{ $_ := set $obj.metadata "labels" $labels -}}
{{ toYaml $obj }}
{{- end -}}
{{- end -}}
{{- end -}}
