package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scrape returns the text exposition of addr's /metrics.
func scrape(t *testing.T, addr string) []byte {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s/metrics: %d %v", addr, resp.StatusCode, err)
	}
	return b
}

// metricNames are the metric families in a text exposition.
func metricNames(b []byte) map[string]bool {
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
		}
	}
	return names
}

// dashboards reads the Grafana dashboards, by file.
func dashboards(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := filepath.Glob("../deploy/grafana/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in deploy/grafana: %v", err)
	}
	out := map[string]dashboard{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[f] = d
	}
	return out
}

// dashboardMetrics are the metric names the Grafana dashboards query.
func dashboardMetrics(t *testing.T) map[string]bool {
	t.Helper()
	name := regexp.MustCompile(`\b(shardcache_[a-z0-9_]+|grpc_[a-z0-9_]+)\b`)
	// Label names are not metrics: drop matchers and by/without lists.
	labels := regexp.MustCompile(`\{[^}]*\}|\b(by|without) \([^)]*\)`)
	out := map[string]bool{}
	for f, d := range dashboards(t) {
		for _, p := range d.Panels {
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q queries nothing", f, p.Title)
			}
			if !strings.HasPrefix(p.Datasource.UID, "${") {
				t.Errorf("%s: panel %q has data source %q, not a template variable", f, p.Title, p.Datasource.UID)
			}
			for _, tg := range p.Targets {
				for _, m := range name.FindAllString(labels.ReplaceAllString(tg.Expr, ""), -1) {
					// A histogram's series are its family's.
					for _, suffix := range []string{"_bucket", "_sum", "_count"} {
						m = strings.TrimSuffix(m, suffix)
					}
					out[m] = true
				}
			}
		}
	}
	return out
}

// dashboard is what the tests read of a Grafana dashboard.
type dashboard struct {
	Panels []struct {
		Title      string `json:"title"`
		Datasource struct {
			Type string `json:"type"`
			UID  string `json:"uid"`
		} `json:"datasource"`
		Targets []struct {
			Expr     string `json:"expr"`
			Query    string `json:"query"`
			Exemplar bool   `json:"exemplar"`
		} `json:"targets"`
	} `json:"panels"`
}

// dashboardQueries are the PromQL expressions of the dashboards' panels,
// with Grafana's variables given values (every instance, a rate interval).
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	var out []string
	vars := strings.NewReplacer(`instance="$instance"`, `instance=~".+"`, "$__rate_interval", "1m", "$__interval", "15s", "$__range", "5m")
	for _, d := range dashboards(t) {
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				if p.Datasource.Type == "prometheus" && tg.Expr != "" {
					out = append(out, vars.Replace(tg.Expr))
				}
			}
		}
	}
	return out
}

// promQuery runs an instant query and returns its vector, by the label.
func promQuery(t *testing.T, prom, query, label string) (map[string]float64, error) {
	t.Helper()
	resp, err := http.Get("http://" + prom + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", query, r.Error)
	}
	out := map[string]float64{}
	for _, s := range r.Data.Result {
		v, _ := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
		out[s.Metric[label]] = v
	}
	return out, nil
}

// TestPrometheusSeesTheTraffic sends known traffic through three nodes,
// checks every /metrics with promtool and against the dashboards, and has
// a real Prometheus scrape the nodes: the relay fraction it computes is
// the one the test sent, and the duration quantiles by route are there.
func TestPrometheusSeesTheTraffic(t *testing.T) {
	for _, bin := range []string{"prometheus", "promtool"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not installed (make test-deps installs it): %v", bin, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startClusterWith(t, ctx, clusterConfig{nodes: 3, origin: newVersionOrigin(), nodeArgs: func(int) []string {
		return []string{"--hot-threshold", "-1"}
	}})

	// 300 objects, each asked twice of the same node: a miss, then a hit.
	client := &http.Client{Timeout: 30 * time.Second}
	sent, relayed := 0, 0
	for i := range 300 {
		nd := c.nodes[i%3]
		for range 2 {
			resp, err := client.Get(fmt.Sprintf("http://%s/obs/%d", nd.client, i))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			sent++
			if resp.Header.Get("X-Cache-Node") != nd.id {
				relayed++
			}
		}
	}
	want := float64(relayed) / float64(sent)

	// Every endpoint passes promtool, and exports what the dashboards query.
	exported := map[string]bool{}
	targets := []string{c.controlOps}
	for _, nd := range c.nodes {
		targets = append(targets, nd.ops)
	}
	for _, addr := range targets {
		b := scrape(t, addr)
		cmd := exec.Command("promtool", "check", "metrics")
		cmd.Stdin = bytes.NewReader(b)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics on %s: %v\n%s", addr, err, out)
		}
		for n := range metricNames(b) {
			exported[n] = true
		}
	}
	for m := range dashboardMetrics(t) {
		if !exported[m] {
			t.Errorf("the dashboards query %s, which no node or control plane exports", m)
		}
	}

	// An admin call, for the control plane's admin panel.
	var nodes any
	if err := c.cachectl(ctx, &nodes, "nodes"); err != nil {
		t.Fatal(err)
	}

	// A real Prometheus scraping the three nodes and the control plane.
	dir := t.TempDir()
	prom := freeAddr(t)
	quoted := make([]string, len(targets))
	for i, a := range targets {
		quoted[i] = strconv.Quote(a)
	}
	config := fmt.Sprintf("global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n  - job_name: shardcache\n    static_configs:\n      - targets: [%s]\n",
		strings.Join(quoted, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	bin, _ := exec.LookPath("prometheus")
	startProcess(t, "prometheus", bin, "--config.file", filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path", filepath.Join(dir, "data"), "--web.listen-address", prom, "--log.level", "warn")
	// Ready once a scrape after the traffic counted every request.
	err := eventually(ctx, func() error {
		got, err := promQuery(t, prom, `sum(shardcache_requests_total)`, "")
		if err != nil {
			return err
		}
		if got[""] != float64(sent) {
			return fmt.Errorf("Prometheus counts %v requests, want %d", got[""], sent)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	frac, err := promQuery(t, prom, `sum(shardcache_requests_total{route="relayed"}) / sum(shardcache_requests_total)`, "")
	if err != nil || math.Abs(frac[""]-want) > 1e-9 {
		t.Fatalf("relay fraction from Prometheus %v (%v); the test sent %d of %d relayed (%v)", frac, err, relayed, sent, want)
	}
	if want < 0.3 || want > 0.9 {
		t.Fatalf("relay fraction %v: three nodes asked in turn should relay about two thirds", want)
	}
	q, err := promQuery(t, prom, `histogram_quantile(0.9, sum by (le, route) (shardcache_request_duration_seconds_bucket))`, "route")
	if err != nil {
		t.Fatal(err)
	}
	for _, route := range []string{"local", "relayed"} {
		if v, ok := q[route]; !ok || !(v > 0 && v < 5) {
			t.Errorf("p90 duration of %s requests from Prometheus: %v (present %t); want a value in (0, 5s)", route, v, ok)
		}
	}

	// Every dashboard query is PromQL that promtool accepts (as a
	// recording rule) and that this Prometheus answers after the traffic.
	queries := dashboardQueries(t)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboards\n    rules:\n")
	for i, q := range queries {
		fmt.Fprintf(&rules, "      - record: dashboard:query%d\n        expr: %s\n", i, strconv.Quote(q))
	}
	rulesFile := filepath.Join(dir, "dashboards.rules.yml")
	if err := os.WriteFile(rulesFile, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("promtool", "check", "rules", rulesFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules on the dashboards' queries: %v\n%s", err, out)
	}
	// A rate needs two scrapes after the traffic: poll until every query
	// has data.
	err = eventually(ctx, func() error {
		for _, q := range queries {
			got, err := promQuery(t, prom, q, "__name__")
			if err != nil {
				return fmt.Errorf("dashboard query %s: %w", q, err)
			}
			if len(got) == 0 {
				return fmt.Errorf("dashboard query %s has no data after the traffic", q)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
