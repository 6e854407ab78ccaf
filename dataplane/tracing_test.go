package dataplane

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/shardcache/shardcache/dataplane/hop"
	"github.com/shardcache/shardcache/dataplane/relay"
)

// otlpReceiver is an OTLP/gRPC trace receiver: what a collector would get.
type otlpReceiver struct {
	collectorpb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (o *otlpReceiver) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			o.spans = append(o.spans, ss.GetSpans()...)
		}
	}
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

func (o *otlpReceiver) received() []*tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*tracepb.Span(nil), o.spans...)
}

func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

func TestRelayedRequestIsOneTraceAcrossBothNodes(t *testing.T) {
	recv := &otlpReceiver{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(gs, recv)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)

	// The exporter is configured as in production, by the OTEL_*
	// environment variables.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+lis.Addr().String())
	exp, err := otlptracegrpc.New(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(50*time.Millisecond)))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })

	var mu sync.Mutex
	var originSaw []string
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		originSaw = append(originSaw, r.Header.Get("Traceparent"))
		mu.Unlock()
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, "traced")
	}))
	t.Cleanup(origin.Close)
	var access syncBuffer
	// Without handoff: the owner's miss goes straight to the origin, so
	// the trace is client, relay, owner, origin.
	a, _, e := startPair(t, origin.URL, noHotKeys, noHandoff, func(c *Config) { c.TracerProvider = tp; c.AccessLog = &access })
	path := pathOwnedBy(t, e, "/traced/", "b")
	resp, body := do(t, http.MethodGet, "http://"+a.ClientAddr().String()+path)
	if resp.StatusCode != 200 || body != "traced" {
		t.Fatalf("GET: %d %q", resp.StatusCode, body)
	}

	// Wait for the spans of both nodes: a's request, its relay, b's
	// handling, b's lookup and b's origin fetch.
	want := []string{"shardcache.client", "relay GET", "shardcache.peer", "cache.lookup", "origin GET"}
	byName := map[string]*tracepb.Span{}
	deadline := time.Now().Add(30 * time.Second)
	for len(byName) < len(want) {
		if time.Now().After(deadline) {
			t.Fatalf("spans received: %v; want %v", byName, want)
		}
		tp.ForceFlush(context.Background())
		for _, s := range recv.received() {
			byName[s.GetName()] = s
		}
		for name := range byName {
			if !slices.Contains(want, name) {
				delete(byName, name)
			}
		}
		time.Sleep(10 * time.Millisecond) // polling the receiver
	}
	client, rel, peer, lookup, fetch := byName[want[0]], byName[want[1]], byName[want[2]], byName[want[3]], byName[want[4]]
	for _, s := range byName {
		if string(s.GetTraceId()) != string(client.GetTraceId()) {
			t.Errorf("span %s is in trace %x, want %x", s.GetName(), s.GetTraceId(), client.GetTraceId())
		}
	}
	if attr(client, "shardcache.node") != "a" || attr(client, "shardcache.route") != "relayed" || attr(peer, "shardcache.node") != "b" {
		t.Errorf("node attributes: client on %q (route %q), peer on %q; want a, relayed, b",
			attr(client, "shardcache.node"), attr(client, "shardcache.route"), attr(peer, "shardcache.node"))
	}
	parents := []struct {
		child, parent *tracepb.Span
	}{{rel, client}, {peer, rel}, {lookup, peer}, {fetch, peer}}
	for _, p := range parents {
		if string(p.child.GetParentSpanId()) != string(p.parent.GetSpanId()) {
			t.Errorf("%s's parent is %x, want %s (%x)", p.child.GetName(), p.child.GetParentSpanId(), p.parent.GetName(), p.parent.GetSpanId())
		}
	}
	if id := hex.EncodeToString(client.GetTraceId()); !strings.Contains(access.String(), `"trace_id":"`+id+`"`) {
		t.Errorf("access log %s lacks the trace id %s", access.String(), id)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(originSaw) != 1 || !strings.Contains(originSaw[0], hex.EncodeToString(client.GetTraceId())) {
		t.Errorf("origin saw traceparent %q, want the trace %x", originSaw, client.GetTraceId())
	}

	// The duration histogram carries the trace as an exemplar, in the
	// OpenMetrics exposition Prometheus asks for.
	req, _ := http.NewRequest("GET", "http://"+a.OpsAddr().String()+"/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	mresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	exposition, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	exemplar := `trace_id="` + hex.EncodeToString(client.GetTraceId()) + `"`
	found := false
	for _, line := range strings.Split(string(exposition), "\n") {
		found = found || strings.HasPrefix(line, `shardcache_request_duration_seconds_bucket{route="relayed"`) && strings.Contains(line, "# {"+exemplar+"}")
	}
	if !found {
		t.Errorf("no shardcache_request_duration_seconds bucket of route relayed has the exemplar {%s}", exemplar)
	}
}

// An exemplar links a latency outlier to its trace: a trace the node did
// not sample was never exported, and is no exemplar.
func TestAnUnsampledTraceIsNoExemplar(t *testing.T) {
	_, tp, origin := neverSampling(t)
	_, n := startOne(t, origin.URL, noHotKeys, func(c *Config) { c.TracerProvider = tp })
	for range 3 {
		do(t, "GET", "http://"+n.ClientAddr().String()+"/unsampled")
	}
	req, _ := http.NewRequest("GET", "http://"+n.OpsAddr().String()+"/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	exposition, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(exposition), "shardcache_request_duration_seconds_bucket") {
		t.Fatalf("no duration histogram in %d bytes of metrics", len(exposition))
	}
	if strings.Contains(string(exposition), "trace_id=") {
		t.Fatal("an unsampled trace is an exemplar of the duration histogram")
	}
}

// decisions is a sampler, the node's own choice (parent-based, sampling no
// new trace, as OTEL_TRACES_SAMPLER=parentbased_traceidratio with a low
// ratio mostly does), that keeps what it decided for each server span.
type decisions struct {
	sdktrace.Sampler
	mu   sync.Mutex
	seen map[string][]sdktrace.SamplingResult // span name -> decisions
	ids  map[string][]string                  // span name -> trace ids
}

// neverSampling is a tracer provider that samples only what a sampled
// parent asks, its decisions recorded, and an origin.
func neverSampling(t *testing.T) (*decisions, *sdktrace.TracerProvider, *httptest.Server) {
	d := &decisions{Sampler: sdktrace.ParentBased(sdktrace.NeverSample()), seen: map[string][]sdktrace.SamplingResult{}, ids: map[string][]string{}}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(d))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	origin := httptest.NewServer(&testOrigin{})
	t.Cleanup(origin.Close)
	return d, tp, origin
}

func (d *decisions) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	res := d.Sampler.ShouldSample(p)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seen[p.Name] = append(d.seen[p.Name], res)
	d.ids[p.Name] = append(d.ids[p.Name], p.TraceID.String())
	return res
}

// A client's traceparent with the sampled flag must not make the node
// record and export its request: a client choosing sampling for every
// request it sends would set the tracing bill, and the trace id it chose
// would put the node's spans into a trace of its making. A client's trace
// context is honoured only from a trusted proxy (TrustedProxies), as the
// client's X-Forwarded-For and X-Request-Id are.
func TestAClientsTraceparentDoesNotForceSampling(t *testing.T) {
	const clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, tt := range []struct {
		name    string
		trusted bool
	}{{"untrusted client", false}, {"trusted proxy", true}} {
		t.Run(tt.name, func(t *testing.T) {
			d, tp, origin := neverSampling(t)
			var access syncBuffer
			_, n := startOne(t, origin.URL, noHotKeys, func(c *Config) {
				c.TracerProvider, c.AccessLog = tp, &access
				if tt.trusted {
					c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
				}
			})
			resp, _ := do(t, "GET", "http://"+n.ClientAddr().String()+"/traced/forced",
				"Traceparent", "00-"+clientTrace+"-00f067aa0ba902b7-01", "Tracestate", "vendor="+strings.Repeat("x", 200))
			if resp.StatusCode != 200 {
				t.Fatalf("GET: %d", resp.StatusCode)
			}
			d.mu.Lock()
			got, ids := d.seen["shardcache.client"], d.ids["shardcache.client"]
			d.mu.Unlock()
			if len(got) != 1 {
				t.Fatalf("client span decisions: %v", got)
			}
			sampled := got[0].Decision == sdktrace.RecordAndSample
			t.Logf("%s: decision %v, trace %s, access log %s", tt.name, got[0].Decision, ids[0], access.String())
			if tt.trusted {
				if !sampled || ids[0] != clientTrace {
					t.Errorf("a trusted proxy's sampled trace context was not followed: decision %v, trace %s", got[0].Decision, ids[0])
				}
				return
			}
			if sampled {
				t.Errorf("an untrusted client's sampled flag made the node sample its request")
			}
			if ids[0] == clientTrace || strings.Contains(access.String(), clientTrace) {
				t.Errorf("the node's span joined the trace the client chose (%s)", clientTrace)
			}
		})
	}
}

// The peer listener continues a member's trace, but a request it refuses
// (no hop marker here; over mutual TLS, a certificate naming no member)
// is not a member's: whoever reaches the listener must not make the node
// sample by sending a sampled traceparent, as on the client listener.
func TestARefusedPeerRequestDoesNotForceSampling(t *testing.T) {
	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, tt := range []struct {
		name   string
		marked bool
	}{{"refused", false}, {"relayed", true}} {
		t.Run(tt.name, func(t *testing.T) {
			d, tp, origin := neverSampling(t)
			_, n := startOne(t, origin.URL, noHotKeys, func(c *Config) { c.TracerProvider = tp })
			req, _ := http.NewRequest("GET", "http://"+n.PeerAddr().String()+"/traced/peer", nil)
			req.Header.Set("Traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01")
			if tt.marked {
				req.Header.Set(hop.Marker, "b")
			}
			h2c := &http.Client{Transport: &http.Transport{Protocols: relay.Protocols(false)}}
			resp, err := h2c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if refused := resp.Header.Get(hop.RefusedField) != ""; refused == tt.marked {
				t.Fatalf("peer request: %s, refused %q", resp.Status, resp.Header.Get(hop.RefusedField))
			}
			d.mu.Lock()
			got, ids := d.seen["shardcache.peer"], d.ids["shardcache.peer"]
			d.mu.Unlock()
			if len(got) != 1 {
				t.Fatalf("peer span decisions: %v", got)
			}
			sampled := got[0].Decision == sdktrace.RecordAndSample
			if tt.marked != sampled || tt.marked != (ids[0] == callerTrace) {
				t.Errorf("%s peer request: decision %v in trace %s; the caller's sampled trace followed: %v, want %v",
					tt.name, got[0].Decision, ids[0], sampled, tt.marked)
			}
		})
	}
}

// A request that does not continue the client's trace (not from a trusted
// proxy) must not pass the client's tracestate and baggage on: beside the
// node's traceparent they would describe a trace they are not of, and a
// tracestate such as OpenTelemetry's "ot=th:0" (sample everything) or a
// vendor's keep flag would set the origin's sampling. From a trusted proxy
// they go on with the trace they belong to.
func TestAnUntrustedClientsTraceStateAndBaggageStopAtTheNode(t *testing.T) {
	for _, tt := range []struct {
		name    string
		trusted bool
	}{{"untrusted client", false}, {"trusted proxy", true}} {
		t.Run(tt.name, func(t *testing.T) {
			tp := sdktrace.NewTracerProvider()
			t.Cleanup(func() { tp.Shutdown(context.Background()) })
			var mu sync.Mutex
			var saw []http.Header
			origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				saw = append(saw, r.Header.Clone())
				mu.Unlock()
				w.Header().Set("Cache-Control", "max-age=60")
			}))
			t.Cleanup(origin.Close)
			a, _, e := startPair(t, origin.URL, noHotKeys, noHandoff, func(c *Config) {
				c.TracerProvider = tp
				if tt.trusted {
					c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
				}
			})
			// A fill on the node itself, a fill by the owner over the peer
			// hop, and a bypass.
			for _, req := range []struct{ method, path string }{
				{"GET", pathOwnedBy(t, e, "/ts/", "a")}, {"GET", pathOwnedBy(t, e, "/ts/", "b")}, {"POST", "/ts/form"},
			} {
				do(t, req.method, "http://"+a.ClientAddr().String()+req.path,
					"Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "Tracestate", "ot=th:0,client=1", "Baggage", "tenant=victim")
			}
			mu.Lock()
			defer mu.Unlock()
			if len(saw) != 3 {
				t.Fatalf("origin requests: %d, want 3", len(saw))
			}
			for i, h := range saw {
				t.Logf("origin request %d: traceparent %q tracestate %q baggage %q", i, h.Get("Traceparent"), h.Get("Tracestate"), h.Get("Baggage"))
				passed := strings.Contains(h.Get("Tracestate"), "client=1") || h.Get("Baggage") != ""
				if tt.trusted != passed {
					t.Errorf("origin request %d: client's tracestate and baggage passed on: %v, want %v", i, passed, tt.trusted)
				}
				if h.Get("Traceparent") == "" {
					t.Errorf("origin request %d carries no traceparent", i)
				}
			}
		})
	}
}

// The client spans of the origin fetch and of the relay carry the URL
// they requested (url.full), query included: a signed URL's signature, a
// ?token=, exported to whoever reads traces, while the access log and
// the node's own log show them REDACTED.
func TestTracesShowNoQueryCredentials(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	origin := httptest.NewServer(&testOrigin{})
	t.Cleanup(origin.Close)
	a, _, e := startPair(t, origin.URL, noHotKeys, noHandoff, func(c *Config) { c.TracerProvider = tp })
	const query = "?X-Amz-Signature=sig-s3cret&token=tok-s3cret&page=2"
	r := mustRing(t, e)
	for _, owner := range []string{"a", "b"} {
		for i := 0; ; i++ {
			if path := fmt.Sprintf("/signed/k%d", i) + query; r.Owner("http127.0.0.1"+path).ID == owner {
				do(t, "GET", "http://"+a.ClientAddr().String()+path)
				break
			}
		}
	}
	spans := func() map[string][]sdktrace.ReadOnlySpan {
		m := map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			m[s.Name()] = append(m[s.Name()], s)
		}
		return m
	}
	waitFor(t, "the origin and relay spans", func() bool { m := spans(); return len(m["origin GET"]) == 2 && len(m["relay GET"]) == 1 })
	for _, s := range rec.Ended() {
		for _, kv := range s.Attributes() {
			if v := kv.Value.Emit(); strings.Contains(v, "sig-s3cret") || strings.Contains(v, "tok-s3cret") {
				t.Errorf("span %s: %s = %s", s.Name(), kv.Key, v)
			}
		}
	}
}
