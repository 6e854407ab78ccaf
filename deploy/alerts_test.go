package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

// alerts are the alerts the PrometheusRule must carry.
var alerts = []string{"ShardcacheErrorRatioHigh", "ShardcacheHitRatioDropped", "ShardcachePeersRefused", "ShardcachePurgesPending", "ShardcacheNodeCutOff"}

// alertTests are promtool unit tests of the alerts that fire on one
// scrape's worth of series: each fires on the series it watches, and not
// before its `for`.
const alertTests = `rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'shardcache_requests_total{namespace="sc",pod="n-0",route="local",cache="MISS",method="GET",code="5xx"}'
        values: '0+10x20'
      - series: 'shardcache_requests_total{namespace="sc",pod="n-0",route="local",cache="HIT",method="GET",code="2xx"}'
        values: '0+90x20'
      - series: 'shardcache_control_plane_cut_off{namespace="sc",pod="n-1"}'
        values: '0 0 1x10'
      - series: 'shardcache_purge_revision{namespace="sc",pod="n-0"}'
        values: '7x20'
      - series: 'shardcache_purge_revision{namespace="sc",pod="n-1"}'
        values: '5x20'
      - series: 'shardcache_peer_refused_total{namespace="sc",pod="n-2",reason="not_a_member"}'
        values: '0+1x20'
    alert_rule_test:
      - {eval_time: 3m, alertname: ShardcacheErrorRatioHigh, exp_alerts: []}
      - eval_time: 10m
        alertname: ShardcacheErrorRatioHigh
        exp_alerts:
          - exp_labels: {severity: page, namespace: sc}
            exp_annotations:
              summary: "More than 5% of client requests answered 5xx in sc"
              description: "Proxy-Status on the answers names the error; the Errors panel splits it by origin and peer."
      - {eval_time: 5m, alertname: ShardcacheNodeCutOff, exp_alerts: []}
      - eval_time: 8m
        alertname: ShardcacheNodeCutOff
        exp_alerts:
          - exp_labels: {severity: page, namespace: sc, pod: n-1}
            exp_annotations:
              summary: "n-1 has been cut off from the control plane"
              description: "It serves with its last ring epoch and revalidates what it stored with the origin. cachectl --nodes stats works without the control plane."
      - eval_time: 15m
        alertname: ShardcachePurgesPending
        exp_alerts:
          - exp_labels: {severity: ticket, namespace: sc, pod: n-1}
            exp_annotations:
              summary: "n-1 has not applied the cluster's latest purges for 10 minutes"
              description: "It may still serve what was purged; cachectl purge status and cachectl nodes show its session."
      - eval_time: 15m
        alertname: ShardcachePeersRefused
        exp_alerts:
          - exp_labels: {severity: ticket, namespace: sc, pod: n-2, reason: not_a_member}
            exp_annotations:
              summary: "n-2 refuses peer-hop requests (not_a_member)"
              description: "not_a_member: a caller whose certificate names no member of the ring; no_hop: something that is not a node reaches the peer port."
`

// TestAlertRules: the base's PrometheusRule carries every alert, each
// with a summary; promtool accepts their PromQL, and its unit tests fire
// them on the series they watch.
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not installed (make test-deps installs it): %v", err)
	}
	m := build(t, "kubernetes/base")
	if len(m.rules) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(m.rules))
	}
	var names []string
	for _, g := range m.rules[0].Spec.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
			if r.Annotations["summary"] == "" || r.Labels["severity"] == "" {
				t.Errorf("alert %s: no summary or severity", r.Alert)
			}
		}
	}
	for _, a := range alerts {
		if !slices.Contains(names, a) {
			t.Errorf("no alert %s among %v", a, names)
		}
	}
	dir := t.TempDir()
	rules, err := yaml.Marshal(map[string]any{"groups": m.rules[0].Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"rules.yaml": rules, "rules_test.yaml": []byte(alertTests)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(promtool, "check", "rules", filepath.Join(dir, "rules.yaml")).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	test := exec.Command(promtool, "test", "rules", "rules_test.yaml")
	test.Dir = dir
	if out, err := test.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
