package deploy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A metric the dashboards or the alerts query, as the code registers it.
type family struct {
	typ    string // counter, gauge, histogram, summary; "" when unknown
	labels map[string]bool
}

// targetLabels are the labels Prometheus (instance, job) and the
// Prometheus Operator's ServiceMonitor add to every scraped series.
var targetLabels = []string{"instance", "job", "namespace", "pod", "service", "container", "endpoint"}

// libraryFamilies are the families registered by the libraries the code
// registers collectors of: client_golang's Go and process collectors, and
// go-grpc-middleware's server and client metrics (with their handling time
// histograms, which the control plane turns on). Each is added only when
// the code calls the constructor named in its key.
var libraryFamilies = map[string]map[string]family{
	"collectors.NewGoCollector": goFamilies("go_gc_duration_seconds summary", "go_gc_gogc_percent gauge", "go_gc_gomemlimit_bytes gauge",
		"go_goroutines gauge", "go_info gauge version", "go_memstats_alloc_bytes gauge", "go_memstats_alloc_bytes_total counter",
		"go_memstats_buck_hash_sys_bytes gauge", "go_memstats_frees_total counter", "go_memstats_gc_sys_bytes gauge",
		"go_memstats_heap_alloc_bytes gauge", "go_memstats_heap_idle_bytes gauge", "go_memstats_heap_inuse_bytes gauge",
		"go_memstats_heap_objects gauge", "go_memstats_heap_released_bytes gauge", "go_memstats_heap_sys_bytes gauge",
		"go_memstats_last_gc_time_seconds gauge", "go_memstats_mallocs_total counter", "go_memstats_mcache_inuse_bytes gauge",
		"go_memstats_mcache_sys_bytes gauge", "go_memstats_mspan_inuse_bytes gauge", "go_memstats_mspan_sys_bytes gauge",
		"go_memstats_next_gc_bytes gauge", "go_memstats_other_sys_bytes gauge", "go_memstats_stack_inuse_bytes gauge",
		"go_memstats_stack_sys_bytes gauge", "go_memstats_sys_bytes gauge", "go_sched_gomaxprocs_threads gauge", "go_threads gauge"),
	"collectors.NewProcessCollector": goFamilies("process_cpu_seconds_total counter", "process_max_fds gauge",
		"process_network_receive_bytes_total counter", "process_network_transmit_bytes_total counter", "process_open_fds gauge",
		"process_resident_memory_bytes gauge", "process_start_time_seconds gauge", "process_virtual_memory_bytes gauge",
		"process_virtual_memory_max_bytes gauge"),
	"grpcprom.NewServerMetrics": goFamilies("grpc_server_started_total counter grpc_type grpc_service grpc_method",
		"grpc_server_handled_total counter grpc_type grpc_service grpc_method grpc_code",
		"grpc_server_msg_received_total counter grpc_type grpc_service grpc_method",
		"grpc_server_msg_sent_total counter grpc_type grpc_service grpc_method",
		"grpc_server_handling_seconds histogram grpc_type grpc_service grpc_method"),
	"grpcprom.NewClientMetrics": goFamilies("grpc_client_started_total counter grpc_type grpc_service grpc_method",
		"grpc_client_handled_total counter grpc_type grpc_service grpc_method grpc_code",
		"grpc_client_msg_received_total counter grpc_type grpc_service grpc_method",
		"grpc_client_msg_sent_total counter grpc_type grpc_service grpc_method",
		"grpc_client_handling_seconds histogram grpc_type grpc_service grpc_method"),
}

// goFamilies reads "name type label..." lines.
func goFamilies(lines ...string) map[string]family {
	out := map[string]family{}
	for _, l := range lines {
		f := strings.Fields(l)
		fam := family{typ: f[1], labels: map[string]bool{}}
		for _, lb := range f[2:] {
			fam.labels[lb] = true
		}
		out[f[0]] = fam
	}
	return out
}

// registered reads the metrics the node (../dataplane) and the control
// plane (../controlplane) register from their source: every
// prometheus.New{Counter,Gauge,Histogram,Summary}[Vec|Func] call's Name and
// labels, every prometheus.NewDesc with the type MustNewConstMetric gives
// it, and the library families of the collectors they construct. The
// deploy module does not import them, so their source is the reference.
func registered(t *testing.T) map[string]family {
	t.Helper()
	out := map[string]family{}
	descs := map[string]string{}     // variable name -> NewDesc's metric
	descTypes := map[string]string{} // variable name -> MustNewConstMetric's type
	for _, root := range []string{"../dataplane", "../controlplane"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.ValueSpec:
					for i, v := range n.Values {
						if c, ok := v.(*ast.CallExpr); ok && callName(c) == "prometheus.NewDesc" && i < len(n.Names) && len(c.Args) == 4 {
							descs[n.Names[i].Name] = stringLit(c.Args[0])
						}
					}
				case *ast.CallExpr:
					name := callName(n)
					if lib, ok := libraryFamilies[name]; ok {
						for k, v := range lib {
							out[k] = v
						}
					}
					switch {
					case name == "prometheus.NewDesc" && len(n.Args) == 4:
						fam := family{labels: map[string]bool{}}
						for _, l := range stringList(n.Args[2]) {
							fam.labels[l] = true
						}
						if m := stringLit(n.Args[0]); m != "" {
							out[m] = merge(out[m], fam)
						}
					case name == "prometheus.MustNewConstMetric" && len(n.Args) >= 2:
						if id, ok := n.Args[0].(*ast.Ident); ok {
							descTypes[id.Name] = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(callName(&ast.CallExpr{Fun: n.Args[1]}), "prometheus."), "Value"))
						}
					case strings.HasPrefix(name, "prometheus.New") && len(n.Args) >= 1:
						kind := strings.TrimPrefix(name, "prometheus.New")
						base := strings.TrimSuffix(strings.TrimSuffix(kind, "Vec"), "Func")
						typ := map[string]string{"Counter": "counter", "Gauge": "gauge", "Histogram": "histogram", "Summary": "summary"}[base]
						opts, ok := n.Args[0].(*ast.CompositeLit)
						if typ == "" || !ok {
							return true
						}
						fam := family{typ: typ, labels: map[string]bool{}}
						var metric string
						for _, e := range opts.Elts {
							kv, ok := e.(*ast.KeyValueExpr)
							if !ok {
								continue
							}
							key, ok := kv.Key.(*ast.Ident)
							if !ok {
								continue
							}
							switch key.Name {
							case "Name":
								metric = stringLit(kv.Value)
							case "Namespace", "Subsystem":
								t.Errorf("%s: %s.%s: the test reads Name only", path, name, key.Name)
							case "ConstLabels":
								if c, ok := kv.Value.(*ast.CompositeLit); ok {
									for _, e := range c.Elts {
										if kv, ok := e.(*ast.KeyValueExpr); ok {
											fam.labels[stringLit(kv.Key)] = true
										}
									}
								}
							}
						}
						if strings.HasSuffix(kind, "Vec") && len(n.Args) == 2 {
							for _, l := range stringList(n.Args[1]) {
								fam.labels[l] = true
							}
						}
						if metric == "" {
							t.Errorf("%s: a %s whose Name is not a string literal", path, name)
							return true
						}
						out[metric] = merge(out[metric], fam)
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for v, m := range descs {
		if typ, ok := descTypes[v]; ok {
			f := out[m]
			f.typ = typ
			out[m] = f
		}
	}
	// A Desc given its type out of sight (from a table of descs) is a
	// counter if named one.
	for m, f := range out {
		if f.typ == "" && strings.HasSuffix(m, "_total") {
			f.typ = "counter"
			out[m] = f
		}
	}
	return out
}

func merge(a, b family) family {
	if a.labels == nil {
		return b
	}
	for l := range b.labels {
		a.labels[l] = true
	}
	if a.typ == "" {
		a.typ = b.typ
	}
	return a
}

// callName is a call's function as written: "pkg.Func" or "Func".
func callName(c *ast.CallExpr) string {
	switch f := c.Fun.(type) {
	case *ast.SelectorExpr:
		if x, ok := f.X.(*ast.Ident); ok {
			return x.Name + "." + f.Sel.Name
		}
	case *ast.Ident:
		return f.Name
	}
	return ""
}

func stringLit(e ast.Expr) string {
	if b, ok := e.(*ast.BasicLit); ok && b.Kind == token.STRING {
		s, _ := strconv.Unquote(b.Value)
		return s
	}
	return ""
}

func stringList(e ast.Expr) []string {
	var out []string
	if c, ok := e.(*ast.CompositeLit); ok {
		for _, e := range c.Elts {
			out = append(out, stringLit(e))
		}
	}
	return out
}

// labelValues are the values the code fixes for a label, from the
// constants that name them: routes (dataplane/metrics Route*), cache
// statuses (dataplane/httpcache Cache*), status classes (StatusClass).
func labelValues(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{"code": {"other"}}
	for file, consts := range map[string]map[string]string{
		"../dataplane/metrics/metrics.go":  {"Route": "route"},
		"../dataplane/httpcache/status.go": {"Cache": "cache"},
	} {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, id := range spec.Names {
				if i >= len(spec.Values) {
					break
				}
				for prefix, label := range consts {
					if v := stringLit(spec.Values[i]); strings.HasPrefix(id.Name, prefix) && v != "" {
						out[label] = append(out[label], v)
					}
				}
				if id.Name == "statusClasses" {
					out["code"] = append(out["code"], stringList(spec.Values[i])...)
				}
			}
			return true
		})
	}
	for _, l := range []string{"route", "cache", "code"} {
		if len(out[l]) < 3 {
			t.Fatalf("the %s label's values from the code: %v; where did they go?", l, out[l])
		}
	}
	return out
}
