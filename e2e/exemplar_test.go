package e2e

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// traceReceiver is an OTLP/gRPC trace receiver, as a collector would be:
// it keeps the trace ids of the spans it gets.
type traceReceiver struct {
	collectorpb.UnimplementedTraceServiceServer
	mu  sync.Mutex
	ids map[string]bool
}

func (o *traceReceiver) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				o.ids[hex.EncodeToString(s.GetTraceId())] = true
			}
		}
	}
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

func (o *traceReceiver) has(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ids[id]
}

// TestExemplarsLinkLatencyToTraces runs traced nodes (the standard OTEL_*
// variables, pointed at the test's OTLP receiver) under a real Prometheus
// with exemplar storage on: after traced requests, Prometheus's exemplar
// query returns, on the request duration histogram, trace ids that the
// receiver got the spans of.
func TestExemplarsLinkLatencyToTraces(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus not installed (make test-deps installs it): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	recv := &traceReceiver{ids: map[string]bool{}}
	lis, err := net.Listen("tcp", freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(gs, recv)
	go gs.Serve(lis)
	defer gs.Stop()
	// The node processes inherit these.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+lis.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	c := startClusterWith(t, ctx, clusterConfig{nodes: 2, origin: newVersionOrigin(), nodeArgs: func(int) []string {
		return []string{"--hot-threshold", "-1"}
	}})

	dir := t.TempDir()
	prom := freeAddr(t)
	config := fmt.Sprintf("global: {scrape_interval: 1s}\nscrape_configs:\n  - job_name: shardcache\n    static_configs:\n      - targets: [%q, %q]\n",
		c.nodes[0].ops, c.nodes[1].ops)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	startProcess(t, "prometheus", bin, "--config.file", filepath.Join(dir, "prometheus.yml"), "--enable-feature=exemplar-storage",
		"--storage.tsdb.path", filepath.Join(dir, "data"), "--web.listen-address", prom, "--log.level", "warn")

	start := time.Now().Add(-time.Minute)
	client := &http.Client{Timeout: 10 * time.Second}
	send := func() {
		for i := range 20 {
			resp, err := client.Get(fmt.Sprintf("http://%s/ex/%d", c.nodes[i%2].client, i))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	// Requests keep coming until Prometheus holds an exemplar whose trace
	// the receiver has: a scrape keeps one exemplar per bucket.
	err = eventually(ctx, func() error {
		send()
		ids, err := exemplarTraceIDs(prom, `shardcache_request_duration_seconds_bucket`, start)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if recv.has(id) {
				return nil
			}
		}
		return fmt.Errorf("Prometheus has exemplar trace ids %v, none received by the OTLP receiver", ids)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// exemplarTraceIDs asks Prometheus for the exemplars of query since start
// and returns their trace_id labels.
func exemplarTraceIDs(prom, query string, start time.Time) ([]string, error) {
	q := url.Values{"query": {query}, "start": {strconv.FormatInt(start.Unix(), 10)}, "end": {strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)}}
	resp, err := http.Get("http://" + prom + "/api/v1/query_exemplars?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   []struct {
			Exemplars []struct {
				Labels map[string]string `json:"labels"`
			} `json:"exemplars"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query_exemplars: %s", r.Error)
	}
	var ids []string
	for _, s := range r.Data {
		for _, e := range s.Exemplars {
			if id := e.Labels["trace_id"]; id != "" {
				ids = append(ids, strings.ToLower(id))
			}
		}
	}
	return ids, nil
}
