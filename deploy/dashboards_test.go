package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A query to check, and where it is.
type query struct {
	where, expr, legend string
}

// dashboardPromQL are the Prometheus queries of the Grafana dashboards:
// every panel target (rows' panels too) whose data source is Prometheus,
// and every templating variable's query.
func dashboardPromQL(t *testing.T) []query {
	t.Helper()
	files, err := filepath.Glob("grafana/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in grafana/: %v", err)
	}
	type ds struct {
		Type string `json:"type"`
	}
	type panel struct {
		Title      string  `json:"title"`
		Datasource ds      `json:"datasource"`
		Panels     []panel `json:"panels"`
		Targets    []struct {
			Datasource   *ds    `json:"datasource"`
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
	}
	var out []query
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Panels     []panel `json:"panels"`
			Templating struct {
				List []struct {
					Name       string          `json:"name"`
					Type       string          `json:"type"`
					Datasource ds              `json:"datasource"`
					Query      json.RawMessage `json:"query"`
				} `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var walk func([]panel)
		walk = func(ps []panel) {
			for _, p := range ps {
				walk(p.Panels)
				for _, tg := range p.Targets {
					typ := p.Datasource.Type
					if tg.Datasource != nil && tg.Datasource.Type != "" {
						typ = tg.Datasource.Type
					}
					if typ == "prometheus" && tg.Expr != "" {
						out = append(out, query{fmt.Sprintf("%s: panel %q", file, p.Title), tg.Expr, tg.LegendFormat})
					}
				}
			}
		}
		walk(d.Panels)
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			var q struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				if err := json.Unmarshal(v.Query, &q); err != nil {
					t.Fatalf("%s: variable %s: %v", file, v.Name, err)
				}
			}
			where := fmt.Sprintf("%s: variable %s", file, v.Name)
			// label_values(selector, label): the label must be the
			// selector's.
			if m := regexp.MustCompile(`^label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`).FindStringSubmatch(q.Query); m != nil {
				out = append(out, query{where, fmt.Sprintf("group by (%s) (%s)", m[2], m[1]), ""})
			} else if v.Datasource.Type == "prometheus" {
				out = append(out, query{where, q.Query, ""})
			}
		}
	}
	return out
}

// promqlKeywords are PromQL words that are neither functions called with
// parentheses nor metrics.
var promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "offset": true, "bool": true, "atan2": true, "inf": true, "nan": true}

// aggregations may have their grouping before their parenthesis.
var aggregations = map[string]bool{"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true}

// groupingWords take a list of label names in parentheses.
var groupingWords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// promToken is one PromQL token: an identifier, a string, a number or
// duration, a Grafana variable, or punctuation (operators one character at
// a time, but the matchers' =~, != and !~).
type promToken struct {
	kind, text string // kind: ident, string, number, var, punct
}

func lexPromQL(s string) ([]promToken, error) {
	var out []promToken
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			v := s[i+1 : j]
			if c != '`' {
				u, err := strconv.Unquote(`"` + strings.ReplaceAll(v, `"`, `\"`) + `"`)
				if err != nil {
					return nil, fmt.Errorf("string %s: %v", s[i:j+1], err)
				}
				v = u
			}
			out = append(out, promToken{"string", v})
			i = j + 1
		case c == '$':
			j := i + 1
			for j < len(s) && (isIdent(s[j]) || s[j] == '{' || s[j] == '}') {
				j++
			}
			out = append(out, promToken{"var", s[i:j]})
			i = j
		case c >= '0' && c <= '9' || c == '.':
			j := i
			for j < len(s) && (isIdent(s[j]) || s[j] == '.') {
				j++
			}
			out = append(out, promToken{"number", s[i:j]})
			i = j
		case isIdent(c) || c == ':':
			j := i
			for j < len(s) && (isIdent(s[j]) || s[j] == ':') {
				j++
			}
			out = append(out, promToken{"ident", s[i:j]})
			i = j
		case (c == '=' || c == '!') && i+1 < len(s) && (s[i+1] == '~' || s[i+1] == '='):
			out = append(out, promToken{"punct", s[i : i+2]})
			i += 2
		default:
			out = append(out, promToken{"punct", string(c)})
			i++
		}
	}
	return out, nil
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// checkPromQL reports what in expr the registered families do not have:
// a metric no code registers (a histogram's _bucket, _sum and _count are
// its family's), a rate of a gauge, a quantile of what is not a
// histogram's buckets, a label a metric does not carry (in a matcher, a
// grouping or the legend), a route, cache or code value the code never
// sets.
func checkPromQL(expr, legend string, fams map[string]family, values map[string][]string) []string {
	toks, err := lexPromQL(expr)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	known := map[string]bool{"le": true, "__name__": true} // labels of the expression's metrics
	for _, l := range targetLabels {
		known[l] = true
	}
	var grouped []string
	var calls []string // enclosing function calls; "" for plain parentheses
	pending := ""      // an aggregation whose grouping comes before its parenthesis
	selectors := 0
	for i := 0; i < len(toks); i++ {
		tk := toks[i]
		next := func(k int) promToken {
			if i+k < len(toks) {
				return toks[i+k]
			}
			return promToken{}
		}
		switch {
		case tk.kind == "punct" && tk.text == "(":
			calls, pending = append(calls, pending), ""
		case tk.kind == "punct" && tk.text == ")":
			if len(calls) > 0 {
				calls = calls[:len(calls)-1]
			}
		case tk.kind == "punct" && tk.text == "[":
			for i < len(toks) && toks[i].text != "]" {
				i++
			}
		case tk.kind == "ident" && groupingWords[tk.text] && next(1).text == "(":
			for i += 2; i < len(toks) && toks[i].text != ")"; i++ {
				if toks[i].kind == "ident" {
					grouped = append(grouped, toks[i].text)
				}
			}
		case tk.kind == "ident" && aggregations[tk.text] && groupingWords[next(1).text]:
			pending = tk.text
		case tk.kind == "ident" && next(1).text == "(":
			calls = append(calls, tk.text)
			i++
		case tk.kind == "ident" && (promqlKeywords[strings.ToLower(tk.text)] || groupingWords[tk.text]):
		case tk.kind == "ident" || tk.kind == "punct" && tk.text == "{":
			name := ""
			if tk.kind == "ident" {
				name = tk.text
				i++
			}
			selectors++
			var matchers [][3]string
			if i < len(toks) && toks[i].text == "{" {
				for i++; i < len(toks) && toks[i].text != "}"; i++ {
					if toks[i].kind == "ident" && i+2 < len(toks) && toks[i+1].kind == "punct" && toks[i+2].kind == "string" {
						matchers = append(matchers, [3]string{toks[i].text, toks[i+1].text, toks[i+2].text})
						i += 2
					}
				}
			} else {
				i--
			}
			if name == "" {
				problems = append(problems, "a selector without a metric name")
				continue
			}
			fam, ok := fams[name]
			suffix := ""
			if !ok {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					if f, found := fams[strings.TrimSuffix(name, s)]; found && strings.HasSuffix(name, s) &&
						(f.typ == "histogram" || f.typ == "summary" && s != "_bucket") {
						fam, ok, suffix = f, true, s
					}
				}
			}
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: no such metric", name))
				continue
			}
			for l := range fam.labels {
				known[l] = true
			}
			if len(calls) > 0 && slices.Contains([]string{"rate", "irate", "increase"}, calls[len(calls)-1]) && suffix == "" && (fam.typ == "gauge" || fam.typ == "summary") {
				problems = append(problems, fmt.Sprintf("%s(%s): a %s, not a counter", calls[len(calls)-1], name, fam.typ))
			}
			if slices.Contains(calls, "histogram_quantile") && suffix != "_bucket" && fam.typ != "histogram" {
				problems = append(problems, fmt.Sprintf("histogram_quantile over %s: a %s, not a histogram's buckets", name, fam.typ))
			}
			for _, m := range matchers {
				if !fam.labels[m[0]] && !slices.Contains(targetLabels, m[0]) && !(m[0] == "le" && suffix == "_bucket") && m[0] != "__name__" {
					problems = append(problems, fmt.Sprintf("%s{%s%s%q}: %s has no label %s", name, m[0], m[1], m[2], name, m[0]))
					continue
				}
				vals, fixed := values[m[0]]
				if !fixed || !fam.labels[m[0]] || !strings.HasPrefix(name, "shardcache_") {
					continue
				}
				alts := []string{m[2]}
				if m[1] == "=~" || m[1] == "!~" {
					if !regexp.MustCompile(`^[A-Za-z0-9_|]+$`).MatchString(m[2]) {
						continue // a pattern, not a list of values
					}
					alts = strings.Split(m[2], "|")
				}
				for _, a := range alts {
					if !slices.Contains(vals, a) {
						problems = append(problems, fmt.Sprintf("%s{%s%s%q}: the code never sets %s=%q (it sets %s)", name, m[0], m[1], m[2], m[0], a, strings.Join(vals, ", ")))
					}
				}
			}
		}
	}
	if selectors == 0 {
		problems = append(problems, "no metric selector found")
	}
	for _, l := range grouped {
		if !known[l] {
			problems = append(problems, fmt.Sprintf("grouping by %s, a label none of the expression's metrics has", l))
		}
	}
	for _, m := range regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`).FindAllStringSubmatch(legend, -1) {
		if !known[m[1]] {
			problems = append(problems, fmt.Sprintf("legend {{%s}}: a label none of the expression's metrics has", m[1]))
		}
	}
	return problems
}

// TestDashboardsQueryRegisteredMetrics: every metric the dashboards and
// the alerts query is one the node or the control plane registers, of the
// type the query takes, with the labels and label values it matches on,
// so that a renamed metric or label fails here rather than leaving a panel
// empty. (The e2e suite checks the same against a live cluster's
// /metrics; this needs no cluster.)
func TestDashboardsQueryRegisteredMetrics(t *testing.T) {
	fams := registered(t)
	values := labelValues(t)
	// The reading of the code finds what it must, or checks nothing.
	if f := fams["shardcache_requests_total"]; f.typ != "counter" || len(f.labels) != 4 || !f.labels["route"] {
		t.Fatalf("shardcache_requests_total read from the code as %+v", f)
	}
	for _, m := range []string{"shardcache_store_bytes", "shardcache_control_leader", "shardcache_local_estimate_hits_total", "grpc_server_handled_total", "go_goroutines"} {
		if fams[m].typ == "" {
			t.Fatalf("%s not read from the code: %+v", m, fams[m])
		}
	}
	queries := dashboardPromQL(t)
	if len(queries) < 20 {
		t.Fatalf("%d dashboard queries; where did they go?", len(queries))
	}
	for _, r := range build(t, "kubernetes/base").rules {
		for _, g := range r.Spec.Groups {
			for _, rule := range g.Rules {
				queries = append(queries, query{"PrometheusRule " + r.Name + ": " + rule.Alert + rule.Record, rule.Expr.String(), ""})
			}
		}
	}
	for _, q := range queries {
		for _, p := range checkPromQL(q.expr, q.legend, fams, values) {
			t.Errorf("%s: %s\n\tin %s", q.where, p, q.expr)
		}
	}
}

// TestCheckPromQLFindsMismatches: the check above finds each kind of
// mismatch it is for, and passes what is right.
func TestCheckPromQLFindsMismatches(t *testing.T) {
	fams := map[string]family{
		"shardcache_requests_total":           {"counter", map[string]bool{"route": true, "cache": true, "code": true}},
		"shardcache_ring_epoch":               {"gauge", map[string]bool{}},
		"shardcache_request_duration_seconds": {"histogram", map[string]bool{"route": true}},
	}
	values := map[string][]string{"route": {"local", "relayed"}, "cache": {"HIT", "MISS"}, "code": {"2xx", "5xx"}}
	for expr, want := range map[string]string{
		`sum by (route) (rate(shardcache_requests_total{cache="HIT",code=~"2xx|5xx"}[$__rate_interval]))`:                           "",
		`histogram_quantile(0.99, sum by (le, route) (rate(shardcache_request_duration_seconds_bucket{instance="$instance"}[5m])))`: "",
		`max by (namespace) (shardcache_ring_epoch) - on (namespace) group_right shardcache_ring_epoch offset 1d > 0`:               "",
		`group by (instance) (shardcache_ring_epoch)`:                                                                               "",
		`rate(shardcache_request_total[5m])`:                                                                                        "no such metric",
		`rate(shardcache_ring_epoch[5m])`:                                                                                           "not a counter",
		`histogram_quantile(0.9, rate(shardcache_requests_total[5m]))`:                                                              "not a histogram",
		`shardcache_requests_total{state="opened"}`:                                                                                 "has no label state",
		`shardcache_requests_total{route="relay"}`:                                                                                  `never sets route="relay"`,
		`shardcache_requests_total{cache=~"HIT|hit"}`:                                                                               `never sets cache="hit"`,
		`sum by (tier) (shardcache_requests_total)`:                                                                                 "grouping by tier",
		`shardcache_request_duration_seconds_count{le="1"}`:                                                                         "has no label le",
	} {
		got := strings.Join(checkPromQL(expr, "", fams, values), "; ")
		if want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", expr, got, want)
		}
	}
	if got := checkPromQL(`sum by (route) (shardcache_requests_total)`, "{{route}} {{tier}}", fams, values); len(got) != 1 || !strings.Contains(got[0], "{{tier}}") {
		t.Errorf("legend {{tier}}: %q", got)
	}
}
