package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardcache/shardcache/cmd/internal/command"
	"github.com/shardcache/shardcache/sdk/admin"
)

// fullRecord is a relayed miss's full record: the relay to the owner, and
// the owner's origin fill inside it.
func fullRecord() *admin.LogRecord {
	return &admin.LogRecord{Start: time.Date(2026, 12, 1, 16, 4, 5, 0, time.UTC), Client: "192.0.2.7", Method: "GET", Host: "shop.example",
		Path: "/img/a.png", Proto: "HTTP/1.1", Status: 200, Bytes: 4096, DurationMS: 12.5, Cache: "MISS", Route: "relayed",
		ServedBy: "node-2", Node: "node-1", Key: "httpshop.example/img/a.png", RequestID: "5f3a9c1e-00000000002a", Reason: "uri-miss",
		UserAgent: "curl/8.5", Full: &admin.LogDetail{
			Request:  map[string][]string{"User-Agent": {"curl/8.5"}, "Cookie": {"REDACTED"}},
			Response: map[string][]string{"Cache-Status": {"node-2; fwd=uri-miss; fwd-status=200; stored; detail=uri-miss, node-1; fwd=uri-miss; detail=relayed"}},
			Stages:   admin.LogStages{LookupMS: 0.02, OriginFirstByteMS: 9.1, StoreMS: 1.5},
			Calls: []admin.LogCall{{Kind: "peer", Node: "node-2", Status: 200, FirstByteMS: 10.25,
				Stages: &admin.LogStages{LookupMS: 0.02, OriginFirstByteMS: 9.1},
				Calls:  []admin.LogCall{{Kind: "origin", Status: 200, FirstByteMS: 9.1}}}},
		}}
}

func TestLogText(t *testing.T) {
	golden(t, "log-full.text", []byte(logText(fullRecord())))
}

func TestLogPrinterFormats(t *testing.T) {
	line, _ := json.Marshal(fullRecord())
	for _, tt := range []struct {
		format string
		full   bool
		want   string
	}{
		{"", false, string(line) + "\n"},
		{"{request_id} {status} {reason} {peers} {duration}ms {req.User-Agent} {resp.X-None}", false,
			"5f3a9c1e-00000000002a 200 uri-miss node-2 12.5ms curl/8.5 -\n"},
		{"", true, logText(fullRecord())},
	} {
		f := admin.LogFilter{Full: tt.full}
		pr, err := checkLogFlags(&f, tt.format, 200)
		if err != nil {
			t.Fatal(err)
		}
		if got := pr.print("node-1", string(line)); got != tt.want {
			t.Errorf("--format %q --full=%t printed\n%s\nwant\n%s", tt.format, tt.full, got, tt.want)
		}
	}
	pr, _ := checkLogFlags(&admin.LogFilter{}, "text", 200)
	if got := pr.print("node-3", `{"dropped":7}`); got != "# node-3 dropped 7 records (rate or a slow reader)\n" {
		t.Errorf("a dropped note printed %q", got)
	}
	f := admin.LogFilter{}
	if _, err := checkLogFlags(&f, "{req.Referer}", 200); err != nil || !f.Full {
		t.Errorf("a template of a header field: %v, full %t; want it to ask for full records", err, f.Full)
	}
}

func TestLogFlagErrors(t *testing.T) {
	for _, tt := range []struct {
		f      admin.LogFilter
		format string
		want   string
	}{
		{admin.LogFilter{Expr: "status >= 5xx"}, "", `--filter: logquery: at 11: status is a number: "5xx" is not one`},
		{admin.LogFilter{Expr: "stauts == 1"}, "", `--filter: logquery: at 1: unknown field "stauts"`},
		{admin.LogFilter{Full: true}, "ncsa", "--format ncsa shows no full records"},
		{admin.LogFilter{}, "yaml", `--format "yaml": want json, ncsa, text, or a template`},
		{admin.LogFilter{}, "{stauts}", `--format: logquery: template at 2: unknown field "stauts"`},
		{admin.LogFilter{Status: "7xx"}, "", `status "7xx"`},
	} {
		_, err := checkLogFlags(&tt.f, tt.format, 200)
		var ce *command.Error
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.As(err, &ce) || ce.Code != command.ExitUsage {
			t.Errorf("%+v --format %q: %v; want a usage error saying %s", tt.f, tt.format, err, tt.want)
		}
	}
}
