{{- define "capstan.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "capstan.fullname" -}}
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

{{- define "capstan.selectorLabels" -}}
app.kubernetes.io/name: {{ include "capstan.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "capstan.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "capstan.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "capstan.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "capstan.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "capstan.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- /* --feature-gates from settings.featureGates (Karpenter's value names, camelCase). Names
capstan does not know, and Karpenter's gates capstan does not implement turned on, fail the
rendering, naming the value. */ -}}
{{- define "capstan.featureGates" -}}
{{- $known := list "spotToSpotConsolidation" "nodeRepair" "reservedCapacity" "nodeOverlay" "staticCapacity" }}
{{- $gates := list }}
{{- range $k, $v := .Values.settings.featureGates }}
{{- if not (has $k $known) }}
{{- fail (printf "settings.featureGates.%s: capstan has no such feature gate (it has %s)" $k (join ", " $known)) }}
{{- end }}
{{- if and $v (ne $k "spotToSpotConsolidation") (ne $k "staticCapacity") }}
{{- fail (printf "settings.featureGates.%s: capstan does not implement Karpenter's %s; leave it false" $k $k) }}
{{- end }}
{{- $gates = append $gates (printf "%s%s=%t" (upper (substr 0 1 $k)) (substr 1 -1 $k) $v) }}
{{- end }}
{{- join "," $gates }}
{{- end }}
