{{/* Names, labels, the image and the configuration shared by every template. */}}

{{- define "azsidecar.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "azsidecar.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Pod selector labels: (dict "root" $ "component" "agent" "zone" "use1-az1") */}}
{{- define "azsidecar.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
azsidecar.io/zone: {{ .zone }}
{{- end -}}

{{- define "azsidecar.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}
{{- end -}}

{{- define "azsidecar.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ default (include "azsidecar.fullname" .) .Values.serviceAccount.name }}
{{- else -}}
{{ required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end -}}
{{- end -}}

{{/* The agent Service of a zone: (dict "root" $ "zone" "use1-az1") */}}
{{- define "azsidecar.agentService" -}}
{{ include "azsidecar.fullname" .root }}-agent-{{ .zone }}
{{- end -}}

{{/* One TOML table and its sub-tables from a map: (dict "prefix" "" "table" $map). Values
     are written with toJson, which is valid TOML for strings, booleans, numbers (whole
     numbers without a fraction: Helm reads every YAML number as a float) and arrays. */}}
{{- define "azsidecar.tomlTable" -}}
{{- $prefix := .prefix -}}
{{- range $k, $v := .table }}
{{- if not (kindIs "map" $v) }}
{{ $k | quote }} = {{ toJson $v }}
{{- end }}
{{- end }}
{{- range $k, $v := .table }}
{{- if kindIs "map" $v }}
{{- $name := ternary ($k | quote) (printf "%s.%s" $prefix ($k | quote)) (eq $prefix "") }}

[{{ $name }}]
{{- include "azsidecar.tomlTable" (dict "prefix" $name "table" $v) }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The effective configuration: .Values.config, with the agents of every zone (their
     Services) and the status port on the pod IP filled in by the chart. */}}
{{- define "azsidecar.config" -}}
{{- $wal := .Values.config.wal | default dict -}}
{{- $_ := required "config.wal.bucket is required: a bucket your account owns (there is no default)" $wal.bucket -}}
{{- $_ := required "config.wal.region is required: the region of config.wal.bucket (there is no default)" $wal.region -}}
{{- $upstream := .Values.config.upstream | default dict -}}
{{- $_ := required "config.upstream.bootstrap_servers is required: your cluster's brokers (there is no default)" $upstream.bootstrap_servers -}}
{{- if eq ($upstream.sasl_mechanism | default "") "OAUTHBEARER" -}}
{{- $_ := required "config.upstream.aws_msk_iam_region is required with OAUTHBEARER (MSK IAM): the cluster's region" $upstream.aws_msk_iam_region -}}
{{- end -}}
{{- $agents := dict -}}
{{- range .Values.zones -}}
{{- $_ := set $agents .id (printf "%s.%s.svc.cluster.local:%d" (include "azsidecar.agentService" (dict "root" $ "zone" .id)) $.Release.Namespace (int $.Values.agent.port)) -}}
{{- end -}}
{{- $generated := dict
      "notify" (dict "agents" $agents)
      "proxy" (dict "metrics_port" (int .Values.status.port) "metrics_host" "0.0.0.0")
      "agent" (dict "listen_host" "0.0.0.0" "listen_port" (int .Values.agent.port) "metrics_port" (int .Values.status.port)) -}}
{{- $config := mustMergeOverwrite (deepCopy .Values.config) $generated -}}
{{- /* An account id given with --set (or unquoted) reads as a number: back to 12 digits. */ -}}
{{- $owner := get (get $config "wal") "expected_bucket_owner" -}}
{{- if and $owner (not (kindIs "string" $owner)) -}}
{{- $_ := set (get $config "wal") "expected_bucket_owner" (printf "%012d" (int64 $owner)) -}}
{{- end -}}
{{- include "azsidecar.tomlTable" (dict "prefix" "" "table" $config) }}
{{- end -}}

{{- define "azsidecar.commonEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: AZSIDECAR__ZONE
  value: {{ .zone | quote }}
- name: AZSIDECAR_NOTIFY_HMAC_KEYS
  valueFrom:
    secretKeyRef:
      name: {{ .root.Values.hmacSecret.name }}
      key: {{ .root.Values.hmacSecret.key }}
{{- end -}}

{{/* HTTP probes on the status port: /livez (startup, liveness), /readyz (readiness). */}}
{{- define "azsidecar.probes" -}}
startupProbe:
  httpGet: { path: /livez, port: status }
  periodSeconds: {{ .Values.probes.startup.periodSeconds }}
  failureThreshold: {{ .Values.probes.startup.failureThreshold }}
livenessProbe:
  httpGet: { path: /livez, port: status }
  periodSeconds: {{ .Values.probes.liveness.periodSeconds }}
  failureThreshold: {{ .Values.probes.liveness.failureThreshold }}
readinessProbe:
  httpGet: { path: /readyz, port: status }
  periodSeconds: {{ .Values.probes.readiness.periodSeconds }}
  failureThreshold: {{ .Values.probes.readiness.failureThreshold }}
{{- end -}}

{{/* The sidecar as a native sidecar container, for a producer pod's initContainers:
     (dict "root" $ "zone" "use1-az1" "configMap" "<name>"). Producers use
     bootstrap.servers=localhost:9092; the status port is on the pod IP for the probes and
     Prometheus, the Kafka listener on loopback. Mount the volumes "azsidecar-config"
     (the ConfigMap) and "azsidecar-tmp" (an emptyDir) in the pod. */}}
{{- define "azsidecar.sidecarContainer" -}}
- name: azsidecar
  image: {{ include "azsidecar.image" .root }}
  imagePullPolicy: {{ .root.Values.image.pullPolicy }}
  restartPolicy: Always
  args: ["proxy", "--config", "/etc/azsidecar/azsidecar.toml", "--proxy-id", "$(POD_NAME)"]
  env:
    {{- include "azsidecar.commonEnv" . | nindent 4 }}
  ports:
    - name: status
      containerPort: {{ .root.Values.status.port }}
  {{- include "azsidecar.probes" .root | nindent 2 }}
  resources:
    {{- toYaml .root.Values.sidecarExample.resources | nindent 4 }}
  securityContext:
    {{- toYaml .root.Values.containerSecurityContext | nindent 4 }}
  volumeMounts:
    - name: azsidecar-config
      mountPath: /etc/azsidecar
      readOnly: true
    - name: azsidecar-tmp
      mountPath: /tmp
{{- end -}}

{{- define "azsidecar.zoneAffinity" -}}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - key: topology.k8s.aws/zone-id
              operator: In
              values: [{{ .zone | quote }}]
{{- end -}}
