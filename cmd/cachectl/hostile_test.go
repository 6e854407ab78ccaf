package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"text/tabwriter"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
)

// evil is what a hostile node puts in the text it sends: an escape
// sequence, a C1 CSI, a CR that overwrites the line, a bidi override, and
// a tab and a line break that would make a cell or a row of their own,
// here a row that passes for node-2's.
const evil = "k\x1b]0;owned\x07\x1b[2J\u009b31m\u202e\rx\t9\nnode-2\tunreachable"

// checkShown fails when out, a table, carries a control a node sent, or
// a row the node made up.
func checkShown(t *testing.T, what string, out string) {
	t.Helper()
	if strings.ContainsAny(out, "\x1b\x07\r\u009b\u202e") {
		t.Errorf("%s shows a node's controls as they came:\n%q", what, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "node-2 ") {
			t.Errorf("%s shows a row a node made up: %q", what, l)
		}
	}
}

// TestTablesEscapeWhatNodesSent: what a node sends (its id, hot keys,
// version, the reasons and fields of an inspection) is shown in a table
// with its controls, tabs and line breaks escaped.
func TestTablesEscapeWhatNodesSent(t *testing.T) {
	table := func(f func(tw *tabwriter.Writer)) string {
		var b bytes.Buffer
		if err := render(&b, "table", nil, f); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	one := 1.0
	v := &topView{Nodes: []*topNode{{Node: evil, RequestsPerS: 1, HitRatio: &one}}, Total: &topNode{Node: "total"},
		HotKeys: []hotKey{{Key: evil, Node: evil, Rate: 10}}}
	checkShown(t, "top", table(func(tw *tabwriter.Writer) { topTable(tw, v, 'r', true) }))

	resp := &pb.ListNodesResponse{Nodes: []*pb.Node{{Member: &pb.Member{Id: evil}}, {Member: &pb.Member{Id: "node-1"}}}}
	st := statsOf(resp, liveStats{errs: map[string]error{evil: errors.New(evil)}})
	checkShown(t, "stats", table(func(tw *tabwriter.Writer) { statsTable(tw, st) }))

	vs := &versions{Nodes: []nodeVersion{{Node: evil, Version: evil}}}
	checkShown(t, "version", table(func(tw *tabwriter.Writer) { versionTable(tw, vs, true) }))

	in := &inspection{URL: "http://a/", Policy: evil, Key: evil, Owners: []string{evil, evil}, Stored: true, Nodes: []nodeInspection{
		{Node: evil, Objects: []admin.StoredObject{{Kind: evil, Variant: evil, Tier: evil, Freshness: evil, ETag: evil, Tags: []string{evil}}},
			Last: &admin.LastAnswer{Cache: evil, Reason: evil}},
		{Node: "node-1", Unreachable: evil},
	}}
	checkShown(t, "inspect", table(func(tw *tabwriter.Writer) { inspectTable(tw, in) }))
	in.wide = true
	checkShown(t, "inspect -o wide", table(func(tw *tabwriter.Writer) { inspectTable(tw, in) }))
}

// TestLogEscapesWhatNodesSent: a node's log stream is printed with its
// controls escaped in every format: JSON lines stay JSON that decodes to
// what the node sent, and a text account or a template's line has no line
// break of the node's, which would forge a record of its own.
func TestLogEscapesWhatNodesSent(t *testing.T) {
	r := fullRecord()
	r.Path, r.Reason, r.Key, r.RequestID = evil, evil, evil, evil
	r.Full.Request["X-Evil"] = []string{evil + "\n*  << Request >> forged  node-2"}
	r.Full.Calls[0].Error = evil
	line, _ := json.Marshal(r)
	for _, tt := range []struct {
		format string
		full   bool
	}{{"json", false}, {"json", true}, {"text", true}, {"{path} {reason} {req.X-Evil}", false}} {
		f := admin.LogFilter{Full: tt.full}
		pr, err := checkLogFlags(&f, tt.format, 200)
		if err != nil {
			t.Fatal(err)
		}
		got := pr.print(evil, string(line))
		checkShown(t, "log --format "+tt.format, got)
		if strings.Count("\n"+got, "\n*  << Request >>") > 1 {
			t.Errorf("--format %s: a node's field forged a record:\n%s", tt.format, got)
		}
		if tt.format == "json" {
			var back admin.LogRecord
			if err := json.Unmarshal([]byte(got), &back); err != nil || back.Path != evil {
				t.Errorf("--format json printed %q: %v; want JSON of the node's record", got, err)
			}
		}
	}
	// A line that is no JSON, raw controls in it, is escaped too.
	for _, format := range []string{"json", "ncsa", "text"} {
		pr, err := checkLogFlags(&admin.LogFilter{}, format, 200)
		if err != nil {
			t.Fatal(err)
		}
		checkShown(t, "log --format "+format+" of a line that is no record", pr.print("node-1", "1.2.3.4 - - "+evil))
	}
}
