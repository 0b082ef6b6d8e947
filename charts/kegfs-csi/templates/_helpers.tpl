{{/* Common names and labels for the kegfs-csi chart. */}}
{{- define "kegfs-csi.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kegfs-csi.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kegfs-csi.labels" -}}
app.kubernetes.io/name: {{ include "kegfs-csi.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- with .Values.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "kegfs-csi.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "kegfs-csi.controllerSA" -}}{{ include "kegfs-csi.fullname" . }}-controller{{- end -}}
{{- define "kegfs-csi.nodeSA" -}}{{ include "kegfs-csi.fullname" . }}-node{{- end -}}
{{/* The CSI driver name kegfs-csi registers with (csi/csi_i.h CSI_DRIVER_NAME). */}}
{{- define "kegfs-csi.driverName" -}}csi.kegfs.io{{- end -}}
{{- define "kegfs-csi.pluginDir" -}}{{ .Values.kubeletDir }}/plugins/{{ include "kegfs-csi.driverName" . }}{{- end -}}

{{/* securityContext of a sidecar: no privileges, read-only root file system. */}}
{{- define "kegfs-csi.sidecarSecurityContext" -}}
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities: {drop: [ALL]}
seccompProfile: {type: RuntimeDefault}
{{- end -}}
