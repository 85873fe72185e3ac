{{- /* The PrometheusRule (metrics.prometheusRule), before prometheusrule.yaml names its series. */ -}}
{{- define "skyhook.prometheusRule" -}}
{{- $r := .Values.metrics.prometheusRule }}
{{- $ns := .Release.Namespace }}
# Alerts on the operator's metrics (monitoring.coreos.com CRDs required). Same as
# deploy/monitoring/prometheus-rule.yaml with the default thresholds; docs/monitoring.md explains
# each alert. Every expression filters on the `namespace` target label the ServiceMonitor adds.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: {{ include "skyhook.fullname" $ }}
  namespace: {{ $ns }}
  labels:
    {{- include "skyhook.labels" $ | nindent 4 }}
    {{- with $r.additionalLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  groups:
    - name: skyhook-operator
      rules:
        - alert: SkyhookOperatorAbsent
          expr: absent(skyhook_operator_leader{namespace="{{ $ns }}"})
          for: {{ $r.absentFor }}
          labels:
            severity: critical
          annotations:
            summary: No Skyhook operator replica is scraped in {{ $ns }}
            description: >-
              No skyhook_operator_leader series from namespace {{ $ns }}: the operator is down or
              its metrics are not scraped. Nothing reconciles Skyhooks meanwhile.
        - alert: SkyhookOperatorNotLeading
          expr: max(skyhook_operator_leader{namespace="{{ $ns }}"}) == 0
          for: {{ $r.notLeadingFor }}
          labels:
            severity: critical
          annotations:
            summary: No Skyhook operator replica in {{ $ns }} leads
            description: >-
              Every replica reports skyhook_operator_leader 0: none holds the Lease
              3c22c1ae.nvidia.com in {{ $ns }}, so no Skyhook is reconciled. Another holder (a
              Go operator left running, or an operator in another namespace using the same
              Lease name) shows in `kubectl -n {{ $ns }} get lease 3c22c1ae.nvidia.com -o yaml`.
        - alert: SkyhookOperatorSeveralLeaders
          expr: sum(skyhook_operator_leader{namespace="{{ $ns }}"}) > 1
          for: {{ $r.notLeadingFor }}
          labels:
            severity: critical
          annotations:
            summary: Several Skyhook operator replicas in {{ $ns }} reconcile at once
            description: >-
              {{`{{ $value }}`}} replicas report skyhook_operator_leader 1. A replica with
              LEADER_ELECTION=false always reconciles; with two replicas that means two writers.
        - alert: SkyhookErroring
          expr: max by (skyhook_name) (skyhook_node_status_count{namespace="{{ $ns }}", status="erroring"}) > 0
          for: {{ $r.erroringFor }}
          labels:
            severity: warning
          annotations:
            summary: Skyhook {{`{{ $labels.skyhook_name }}`}} has nodes erroring
            description: >-
              {{`{{ $value }}`}} node(s) of Skyhook {{`{{ $labels.skyhook_name }}`}} have been
              erroring for {{ $r.erroringFor }}. `kubectl skyhook node status --skyhook
              {{`{{ $labels.skyhook_name }}`}}` shows the nodes and packages, `kubectl skyhook jobs
              --skyhook {{`{{ $labels.skyhook_name }}`}}` why each stage failed.
        - alert: SkyhookRolloutStopped
          expr: max by (skyhook_name, policy_name, compartment_name) (skyhook_rollout_should_stop{namespace="{{ $ns }}"}) == 1
          for: {{ $r.stoppedFor }}
          labels:
            severity: warning
          annotations:
            summary: The rollout of Skyhook {{`{{ $labels.skyhook_name }}`}} stopped
            description: >-
              Compartment {{`{{ $labels.compartment_name }}`}} of DeploymentPolicy
              {{`{{ $labels.policy_name }}`}} reached its failureThreshold of failed batches in a
              row; no new node starts there. Fix the failing nodes, then run `kubectl skyhook
              deployment-policy reset {{`{{ $labels.skyhook_name }}`}}`.
        - alert: SkyhookRolloutStalled
          expr: >-
            (max by (skyhook_name) (skyhook_node_status_count{namespace="{{ $ns }}", status="in_progress"}) > 0)
            unless on (skyhook_name)
            (max by (skyhook_name) (changes(skyhook_node_status_count{namespace="{{ $ns }}", status="complete"}[{{ $r.stalledAfter }}])) > 0)
          for: 5m
          labels:
            severity: warning
          annotations:
            summary: Skyhook {{`{{ $labels.skyhook_name }}`}} completed no node in {{ $r.stalledAfter }}
            description: >-
              Nodes are in progress but none completed in {{ $r.stalledAfter }}: a drain held by a
              pod that cannot be evicted (PodDisruptionBudget, podNonInterruptLabels), a stage
              waiting on its deadline, or a Job that cannot start. `kubectl skyhook node status
              --skyhook {{`{{ $labels.skyhook_name }}`}} -o wide`.
        - alert: SkyhookNodeCordonedTooLong
          # The operator's metrics do not show cordons; this needs kube-state-metrics. It fires for
          # any node cordoned that long while some Skyhook has nodes in progress.
          expr: >-
            (max by (node) (kube_node_spec_unschedulable) == 1)
            and on ()
            (sum(skyhook_node_status_count{namespace="{{ $ns }}", status="in_progress"}) > 0)
          for: {{ $r.cordonedFor }}
          labels:
            severity: warning
          annotations:
            summary: Node {{`{{ $labels.node }}`}} cordoned for over {{ $r.cordonedFor }} during a Skyhook rollout
            description: >-
              A Skyhook package with an interrupt cordons its node, drains it, then runs. The
              annotation skyhook.nvidia.com/cordon_<skyhook> on the node names the Skyhook holding
              the cordon; `kubectl get pods -A --field-selector spec.nodeName={{`{{ $labels.node }}`}}`
              shows what the drain waits for.
        - alert: SkyhookWriteFailed
          expr: max by (skyhook_name) (skyhook_write_failures{namespace="{{ $ns }}"}) > 0
          for: 5m
          labels:
            severity: warning
          annotations:
            summary: Writes of Skyhook {{`{{ $labels.skyhook_name }}`}} keep failing
            description: >-
              The API server refuses some write of the Skyhook (a 4xx: a quota, an admission
              policy, an object over its size limit). Its condition
              skyhook.nvidia.com/WriteFailed and Warning Events name the objects and the
              reason: `kubectl describe skyhook {{`{{ $labels.skyhook_name }}`}}`.
        - alert: SkyhookHealthGateFailed
          expr: max by (skyhook_name) (skyhook_health_gate_nodes{namespace="{{ $ns }}", state="failed"}) > 0
          for: {{ $r.healthGateFailedFor }}
          labels:
            severity: warning
          annotations:
            summary: Nodes of Skyhook {{`{{ $labels.skyhook_name }}`}} failed its health gate
            description: >-
              {{`{{ $value }}`}} node(s) finished their stages but did not pass the Skyhook's
              healthGate within its timeout: they stay cordoned and count as failed nodes of
              their batch. The condition skyhook.nvidia.com/HealthGate names each node and
              why: `kubectl describe skyhook {{`{{ $labels.skyhook_name }}`}}`.
        - alert: SkyhookGateHeldLong
          expr: max by (skyhook_name, gate) (skyhook_rollout_gate_held_seconds{namespace="{{ $ns }}"}) > {{ $r.gateHeldSeconds }}
          for: 5m
          labels:
            severity: info
          annotations:
            summary: The {{`{{ $labels.gate }}`}} gate has held Skyhook {{`{{ $labels.skyhook_name }}`}} for long
            description: >-
              A rollout gate (window, alert, soak or health) has held the rollout without a
              break for over {{ $r.gateHeldSeconds }} s. Its condition on the Skyhook says why:
              `kubectl describe skyhook {{`{{ $labels.skyhook_name }}`}}`.
        - alert: SkyhookOperatorApiErrors
          expr: >-
            sum(rate(skyhook_api_requests_total{namespace="{{ $ns }}", code=~"5xx|error"}[10m]))
            / sum(rate(skyhook_api_requests_total{namespace="{{ $ns }}"}[10m])) > {{ $r.apiErrorRatio }}
          for: 15m
          labels:
            severity: warning
          annotations:
            summary: The Skyhook operator's API requests fail
            description: >-
              More than {{ mulf $r.apiErrorRatio 100 }}% of the operator's requests to the API server
              end in a 5xx or no response.
{{- end }}
