{{/* Chart name, overridable. */}}
{{- define "gpuval.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's objects. Cluster-scoped objects (ClusterRoles, the admission policy)
carry it too, so two releases in one cluster never collide.
*/}}
{{- define "gpuval.fullname" -}}
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

{{- define "gpuval.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpuval.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuval.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpuval.labels" -}}
helm.sh/chart: {{ include "gpuval.chart" . }}
{{ include "gpuval.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpuval
{{- end }}

{{- define "gpuval.operator.selectorLabels" -}}
{{ include "gpuval.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The operator's ServiceAccount. */}}
{{- define "gpuval.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (printf "%s-operator" (include "gpuval.fullname" .)) .Values.operator.serviceAccount.name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- required "operator.serviceAccount.name must name an existing ServiceAccount when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The agents' ServiceAccount: the identity the admission policy keeps to its own node. */}}
{{- define "gpuval.agentServiceAccountName" -}}
{{- default (printf "%s-agent" (include "gpuval.fullname" .)) .Values.agent.serviceAccount.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Namespace the operator creates agent pods in: their own, so that only it needs the `privileged`
Pod Security level and the release's namespace can enforce `restricted`.
*/}}
{{- define "gpuval.agentNamespace" -}}
{{- default (printf "%s-agents" .Release.Namespace) .Values.agent.namespace.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The agent pods' labels (gpuval_api.keys: LABEL_COMPONENT = AGENT_COMPONENT), as the operator sets them. */}}
{{- define "gpuval.agent.podLabels" -}}
app.kubernetes.io/component: agent
{{- end }}

{{/* The API server's user name for the agents' ServiceAccount tokens. */}}
{{- define "gpuval.agentUsername" -}}
{{- printf "system:serviceaccount:%s:%s" (include "gpuval.agentNamespace" .) (include "gpuval.agentServiceAccountName" .) }}
{{- end }}

{{/* image reference: repository@digest when a digest is given, else repository:tag. */}}
{{- define "gpuval.operator.image" -}}
{{- $img := .Values.operator.image }}
{{- if $img.digest }}
{{- printf "%s@%s" $img.repository $img.digest }}
{{- else }}
{{- printf "%s:%s" $img.repository (default .Chart.AppVersion $img.tag) }}
{{- end }}
{{- end }}

{{/*
NetworkPolicy egress rules both the operator and the agents need: the API server runs outside the
pod network (or on the hosts), so no pod or namespace selector reaches it: its addresses when
given, else any address on its ports only; and the cluster DNS.
*/}}
{{- define "gpuval.networkPolicy.egressApiServerAndDns" -}}
{{- $np := .Values.networkPolicy -}}
- ports:
    {{- range $np.apiServer.ports }}
    - protocol: TCP
      port: {{ . }}
    {{- end }}
  {{- with $np.apiServer.cidrs }}
  to:
    {{- range . }}
    - ipBlock:
        cidr: {{ . }}
    {{- end }}
  {{- end }}
{{- include "gpuval.networkPolicy.egressDns" . | nindent 0 }}
{{- end }}

{{/* NetworkPolicy egress to the cluster DNS, when networkPolicy.dns.enabled (else nothing). */}}
{{- define "gpuval.networkPolicy.egressDns" -}}
{{- $dns := .Values.networkPolicy.dns }}
{{- if $dns.enabled -}}
- to:
    - namespaceSelector:
        {{- toYaml $dns.namespaceSelector | nindent 8 }}
      podSelector:
        {{- toYaml $dns.podSelector | nindent 8 }}
  ports:
    - protocol: UDP
      port: 53
    - protocol: TCP
      port: 53
{{- end }}
{{- end }}

{{/* The PriorityClass of agent pods whose GpuValidation names none: the chart's own when it
creates one, else agent.priorityClass.name (an existing class), else none (empty). */}}
{{- define "gpuval.agentPriorityClassName" -}}
{{- $pc := .Values.agent.priorityClass }}
{{- if $pc.name }}{{ $pc.name }}{{ else if $pc.create }}{{ printf "%s-agent" (include "gpuval.fullname" .) | trunc 253 }}{{ end }}
{{- end }}
