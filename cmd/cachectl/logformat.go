package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardcache/shardcache/sdk/admin"
	"github.com/shardcache/shardcache/sdk/logquery"
)

// logPrinter prints the lines of a node's log stream: JSON and NCSA as the
// node sends them, a template's line, or (text) an account a request, as
// varnishlog prints one.
type logPrinter struct {
	json, ncsa bool
	template   *logquery.Template
}

// print is what one line of node's stream prints as. What a node sent is
// shown with its controls escaped (shown): a JSON line stays JSON with the
// same values (\u escapes), and a text account or a template's line gets
// no line break of the node's, which would forge a record.
func (p *logPrinter) print(node, line string) string {
	if p.json || p.ncsa {
		return shown(line) + "\n"
	}
	var note struct {
		Dropped *uint64 `json:"dropped"`
	}
	if json.Unmarshal([]byte(line), &note) == nil && note.Dropped != nil {
		return fmt.Sprintf("# %s dropped %d records (rate or a slow reader)\n", shown(node), *note.Dropped)
	}
	var r admin.LogRecord
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return fmt.Sprintf("# %s sent a line that is no record: %.200s\n", shown(node), shown(line))
	}
	if p.template != nil {
		return shown(p.template.Render(&r)) + "\n"
	}
	return logText(&r)
}

// logText is r as an account: a header line, the request, its fields, the
// requests made for it, the answer's fields, the stages, and the end.
func logText(r *admin.LogRecord) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*  << Request >> %s  %s  %s\n", dash(shown(r.RequestID)), shown(r.Node), r.Start.UTC().Format(time.RFC3339Nano))
	row := func(indent int, tag, format string, args ...any) {
		fmt.Fprintf(&b, "-  %s%-11s %s\n", strings.Repeat("  ", indent), tag, shown(fmt.Sprintf(format, args...)))
	}
	row(0, "Begin", "%s %s %s  client %s  host %s", r.Method, r.Path, r.Proto, r.Client, r.Host)
	if r.Key != "" {
		row(0, "Key", "%s", r.Key)
	}
	d := r.Full
	if d != nil {
		for _, kv := range fields(d.Request) {
			row(0, "ReqHeader", "%s", kv)
		}
		for _, c := range d.Calls {
			logCall(row, 0, c)
		}
		if d.DroppedCalls > 0 {
			row(0, "Calls", "%d more not kept", d.DroppedCalls)
		}
		for _, kv := range fields(d.Response) {
			row(0, "RespHeader", "%s", kv)
		}
		row(0, "Stages", "%s", stagesText(d.Stages))
	}
	end := fmt.Sprintf("%d %s", r.Status, dash(r.Cache))
	if r.Reason != "" {
		end += " reason " + r.Reason
	}
	row(0, "End", "%s  route %s  served by %s  %d bytes  %sms  trace %s", end, r.Route, dash(r.ServedBy), r.Bytes,
		strconv.FormatFloat(r.DurationMS, 'f', -1, 64), dash(r.TraceID))
	return b.String()
}

// logCall adds a request made for the record's request, and the peer's
// own account of it beneath.
func logCall(row func(int, string, string, ...any), indent int, c admin.LogCall) {
	target := c.Kind
	if c.Node != "" {
		target += " " + c.Node
	}
	result := strconv.Itoa(c.Status)
	if c.Error != "" {
		result = "failed: " + c.Error
	}
	row(indent, "Call", "%s %s  first byte %sms", target, result, strconv.FormatFloat(c.FirstByteMS, 'f', -1, 64))
	if c.Stages != nil {
		row(indent+1, "Stages", "%s", stagesText(*c.Stages))
	}
	for _, sub := range c.Calls {
		logCall(row, indent+1, sub)
	}
}

func stagesText(st admin.LogStages) string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) + "ms" }
	return "lookup " + f(st.LookupMS) + "  collapse wait " + f(st.CollapseWaitMS) + "  origin first byte " + f(st.OriginFirstByteMS) +
		"  store " + f(st.StoreMS)
}

// fields are h's fields as "Name: value" lines, by name.
func fields(h map[string][]string) []string {
	var out []string
	for k, vs := range h {
		for _, v := range vs {
			out = append(out, k+": "+v)
		}
	}
	slices.Sort(out)
	return out
}
