{{/* names and labels */}}
{{- define "autorecovery.name" -}}
{{- printf "%s" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "autorecovery.labels" -}}
app.kubernetes.io/name: autorecovery
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "autorecovery.selector" -}}
app.kubernetes.io/name: autorecovery
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "autorecovery.mode" -}}
{{- if not (has .Values.mode (list "deployment" "sidecar")) -}}
{{- fail (printf "values: mode=%v is not one of deployment, sidecar" .Values.mode) -}}
{{- end -}}
{{- .Values.mode -}}
{{- end -}}

{{/* the daemon container, the same in both modes */}}
{{- define "autorecovery.container" -}}
- name: autorecovery
  image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["run", "-c", "/etc/autorecovery/bk_server.conf"]
  env:
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    {{- if and (eq .Values.mode "sidecar") .Values.bookie.id }}
    - name: BK_bookieId
      value: {{ tpl .Values.bookie.id . | quote }}
    {{- end }}
    {{- with .Values.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - {name: http, containerPort: {{ .Values.httpPort }}}
  startupProbe:
    httpGet: {path: /healthz, port: http}
    periodSeconds: 2
    failureThreshold: 30
  livenessProbe:
    httpGet: {path: /healthz, port: http}
    periodSeconds: 10
    failureThreshold: 3
  readinessProbe:
    httpGet: {path: /readyz, port: http}
    periodSeconds: 5
  resources:
    {{- toYaml .Values.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  volumeMounts:
    - {name: autorecovery-conf, mountPath: /etc/autorecovery, readOnly: true}
{{- end -}}

{{- define "autorecovery.podExtras" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
