package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs:\n--- got\n%s--- want\n%s", name, got, want)
	}
}

func testEpoch() *pb.RingEpoch {
	return &pb.RingEpoch{
		Epoch: 7, PreviousEpoch: 6, Reason: "+node-3",
		CreatedAt: timestamppb.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)),
		Members: []*pb.Member{
			{Id: "node-1", PeerAddress: "10.0.0.1:9080", PublicUrl: "http://10.0.0.1:8080", State: pb.MemberState_MEMBER_STATE_ACTIVE, Zone: "a"},
			{Id: "node-3", PeerAddress: "10.0.0.3:9080", PublicUrl: "http://10.0.0.3:8080", Weight: 2, State: pb.MemberState_MEMBER_STATE_ACTIVE},
		},
	}
}

// goldenFormats renders v in every output format and compares each with
// testdata/name.FORMAT.
func goldenFormats[T any](t *testing.T, name string, v T, table func(*tabwriter.Writer, T)) {
	t.Helper()
	for _, format := range outputFormats {
		t.Run(format, func(t *testing.T) {
			var b bytes.Buffer
			if err := render(&b, format, v, func(tw *tabwriter.Writer) { table(tw, v) }); err != nil {
				t.Fatal(err)
			}
			golden(t, name+"."+format, b.Bytes())
		})
	}
}

func TestRingOutput(t *testing.T) {
	goldenFormats(t, "ring", testEpoch(), ringTable)
}

func TestNodesTable(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 30, 0, time.UTC)
	resp := &pb.ListNodesResponse{Epoch: 7, Nodes: []*pb.Node{
		{Member: testEpoch().GetMembers()[0], InRing: true, SessionReplica: "cp-1", ServingEpoch: 7,
			Load:         &pb.LoadReport{MemoryObjects: 1200, MemoryBytes: 5 << 20, RequestsTotal: 90000, HitsTotal: 88000},
			LastReportAt: timestamppb.New(now.Add(-4 * time.Second)),
			LastRefused: &pb.RefusedSession{PeerAddress: "10.0.0.9:9080", RemoteAddress: "10.0.0.9:41234", At: timestamppb.New(now.Add(-12 * time.Second)),
				Replica: "cp-2", Reason: "controlplane: the node id has an open session (peer 10.0.0.1:9080, replica cp-1, since 2026-11-30T11:00:00Z)"}},
		{Member: &pb.Member{Id: "node-2", State: pb.MemberState_MEMBER_STATE_DRAINING}},
		{Member: &pb.Member{Id: "node-3", PeerAddress: "10.0.0.3:9080", PeerHop: "insecure", State: pb.MemberState_MEMBER_STATE_ACTIVE}, InRing: true},
	}}
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	nodesTable(tw, resp, now, false)
	tw.Flush()
	golden(t, "nodes.table", b.Bytes())
}

func TestBadOutputFormat(t *testing.T) {
	if err := render(&bytes.Buffer{}, "xml", testEpoch(), nil); err == nil {
		t.Fatal("-o xml accepted")
	}
}

// The default tables fit a terminal of 80 columns (-o wide may not).
func TestTablesFit80Columns(t *testing.T) {
	for _, name := range []string{"nodes", "inspect", "inspect-none", "stats", "ring", "purge", "version"} {
		b, err := os.ReadFile(filepath.Join("testdata", name+".table"))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if n := utf8.RuneCountInString(line); n > 80 {
				t.Errorf("%s.table line %d is %d columns:\n%s", name, i+1, n, line)
			}
		}
	}
}

// Every -o json has one style: snake_case names, numbers as numbers,
// empty lists as [].
func TestOneJSONStyle(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) == 0 {
		t.Fatal(files, err)
	}
	snake := regexp.MustCompile(`^[a-z0-9]+(_[a-z0-9]+)*$`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var walk func(path string, v any)
		walk = func(path string, v any) {
			switch v := v.(type) {
			case map[string]any:
				for k, e := range v {
					if !snake.MatchString(k) {
						t.Errorf("%s: %s.%s is not snake_case", f, path, k)
					}
					walk(path+"."+k, e)
				}
			case []any:
				for i, e := range v {
					walk(fmt.Sprintf("%s[%d]", path, i), e)
				}
			case string:
				if _, err := strconv.ParseInt(v, 10, 64); err == nil && !strings.HasSuffix(path, "version") {
					t.Errorf("%s: %s is the number %s in a string", f, path, v)
				}
			}
		}
		walk("", v)
	}
	if b, _ := os.ReadFile("testdata/ring.json"); !strings.Contains(string(b), `"epoch": 7,`) {
		t.Fatalf("ring.json: the epoch is not the number 7:\n%s", b)
	}
	// An empty list is [] in a message and in a struct alike.
	var b bytes.Buffer
	if err := render(&b, "json", &pb.ListNodesResponse{}, nil); err != nil || !strings.Contains(b.String(), `"nodes": []`) {
		t.Fatalf("an empty node list: %s, %v", b.String(), err)
	}
	b.Reset()
	if err := render(&b, "json", &versions{Nodes: []nodeVersion{}}, nil); err != nil || !strings.Contains(b.String(), `"nodes": []`) {
		t.Fatalf("an empty version list: %s, %v", b.String(), err)
	}
}
