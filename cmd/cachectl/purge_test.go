package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
)

// runCachectl runs cachectl with args against a control plane nobody
// listens on: any call it makes fails with admin.ErrUnavailable.
func runCachectl(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := newRootCommand()
	root.SilenceUsage, root.SilenceErrors = true, true
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append([]string{"--control-plane", "127.0.0.1:1", "--token", "t", "--timeout", "300ms"}, args...))
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func TestBadInputRefusedBeforeAnyCall(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"purge"}, "give a URL, --cache-key, --prefix or --tag"},
		{[]string{"purge", "https://www.example.com/a", "--tag", "t"}, "give only one of URL, --cache-key, --prefix and --tag (got URL and --tag)"},
		{[]string{"purge", "--prefix", "/a/", "--cache-key", "k"}, "(got --cache-key and --prefix)"},
		{[]string{"purge", "a", "b"}, "accepts at most 1 arg"},
		{[]string{"purge", ""}, `URL "": want an absolute http or https URL with a host`},
		{[]string{"purge", "www.example.com/a"}, `URL "www.example.com/a": want an absolute http or https URL`},
		{[]string{"purge", "ftp://www.example.com/a"}, "want an absolute http or https URL"},
		{[]string{"purge", "http:///a"}, "want an absolute http or https URL"},
		{[]string{"purge", "https://www.example.com/%zz"}, "want an absolute http or https URL"},
		{[]string{"purge", "--prefix", "static/"}, `--prefix "static/": must start with "/"`},
		{[]string{"purge", "--prefix", ""}, `--prefix "": must start with "/"`},
		{[]string{"purge", "--prefix", "/"}, "--prefix / purges everything on every host: add --all to confirm"},
		{[]string{"purge", "--prefix", "/", "--host", "www.example.com"}, "purges everything on www.example.com: add --all"},
		{[]string{"purge", "--prefix", "/a/", "--host", "www.example.com:8080"}, "give a host name without scheme, port or path"},
		{[]string{"purge", "--tag", "t", "--host", "www.example.com"}, "--host and --all go with --prefix"},
		{[]string{"purge", "https://www.example.com/", "--all"}, "--host and --all go with --prefix"},
		{[]string{"purge", "--tag", ""}, "--tag is empty"},
		{[]string{"purge", "--tag", "a,b"}, `--tag "a,b": give one tag`},
		{[]string{"purge", "--cache-key", ""}, "--cache-key is empty"},
		{[]string{"purge", "https://www.example.com/", "--wait", "0s"}, "--wait 0s: want a positive duration"},
		{[]string{"purge", "https://www.example.com/", "-o", "xml"}, `-o "xml"`},
		{[]string{"locate", "/index.html"}, `URL "/index.html": want an absolute http or https URL`},
		{[]string{"locate"}, "accepts 1 arg"},
		{[]string{"stats", "-o", "csv"}, `-o "csv"`},
		{[]string{"version", "-o", "csv"}, `-o "csv"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, _, err := runCachectl(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one naming %q", err, tt.want)
			}
			if errors.Is(err, admin.ErrUnavailable) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %q: a call was made, or the message is not one line", err)
			}
		})
	}
}

// A valid purge does reach for the control plane: the refusals above are
// not an unreachable control plane in disguise.
func TestValidPurgeCallsTheControlPlane(t *testing.T) {
	_, _, err := runCachectl(t, "purge", "--prefix", "/", "--all", "--request-id", "r-1")
	if !errors.Is(err, admin.ErrUnavailable) || !strings.Contains(err.Error(), "purge r-1 (prefix every host /)") {
		t.Fatalf("err = %v, want the control plane unavailable for purge r-1", err)
	}
}

func TestAwaitPurgeReportsPendingNodes(t *testing.T) {
	pending := &pb.PurgeStatus{Results: []*pb.PurgeResult{{NodeId: "node-a"}, {NodeId: "node-b"}}, Pending: []string{"node-c"}, Acknowledged: 2}
	complete := &pb.PurgeStatus{Results: []*pb.PurgeResult{{NodeId: "node-a"}, {NodeId: "node-b"}, {NodeId: "node-c"}}, Complete: true, Acknowledged: 3}
	const progressLine = "waiting for 1 of 3 nodes: node-c\n"

	t.Run("completes", func(t *testing.T) {
		var waits []time.Duration
		send := func(_ context.Context, w time.Duration) (*pb.PurgeStatus, error) {
			waits = append(waits, w)
			return pending, nil
		}
		answers := []*pb.PurgeStatus{pending, complete}
		poll := func(_ context.Context, w time.Duration) (*pb.PurgeStatus, error) {
			waits = append(waits, w)
			st := answers[0]
			answers = answers[1:]
			return st, nil
		}
		var progress bytes.Buffer
		st, err := awaitPurge(context.Background(), time.Minute, send, poll, &progress)
		if err != nil || !st.GetComplete() {
			t.Fatalf("awaitPurge = %v, %v; want the complete status", st, err)
		}
		if got := progress.String(); got != progressLine+progressLine {
			t.Errorf("progress:\n%s", got)
		}
		for _, w := range waits {
			if w != progressEvery {
				t.Errorf("a call waited %s, want %s", w, progressEvery)
			}
		}
		if purgeOutcome(st, time.Minute) != nil {
			t.Error("a complete purge is an error")
		}
	})

	t.Run("nodes still pending", func(t *testing.T) {
		// Like the control plane, the fake holds a call for its wait.
		held := func(_ context.Context, w time.Duration) (*pb.PurgeStatus, error) {
			time.Sleep(w)
			return pending, nil
		}
		var progress bytes.Buffer
		st, err := awaitPurge(context.Background(), 50*time.Millisecond, held, held, &progress)
		if err != nil || st.GetComplete() {
			t.Fatalf("awaitPurge = %v, %v; want the pending status", st, err)
		}
		err = purgeOutcome(&pb.PurgeStatus{Purge: &pb.Purge{Id: "r-1"}, Results: st.GetResults(), Pending: st.GetPending(), Acknowledged: st.GetAcknowledged()}, time.Minute)
		want := "purge r-1: 1 of 3 nodes did not acknowledge within 1m0s (node-c); it is recorded, and they apply it when they reconnect, before they serve again"
		if err == nil || err.Error() != want {
			t.Errorf("outcome = %v\nwant %s", err, want)
		}
	})

	t.Run("call fails", func(t *testing.T) {
		failing := func(context.Context, time.Duration) (*pb.PurgeStatus, error) { return nil, admin.ErrUnavailable }
		if _, err := awaitPurge(context.Background(), time.Minute, failing, failing, &bytes.Buffer{}); !errors.Is(err, admin.ErrUnavailable) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestPurgeNodeErrorFails(t *testing.T) {
	st := &pb.PurgeStatus{Purge: &pb.Purge{Id: "r-1"}, Complete: true,
		Results: []*pb.PurgeResult{{NodeId: "node-a"}, {NodeId: "node-b", Error: "disk tier: read-only file system"}}}
	err := purgeOutcome(st, time.Minute)
	if err == nil || err.Error() != "purge r-1 failed on node-b: disk tier: read-only file system" {
		t.Fatalf("outcome = %v", err)
	}
}

func testPurgeStatus() *pb.PurgeStatus {
	return &pb.PurgeStatus{
		Purge: &pb.Purge{Id: "deploy-1234", Kind: pb.PurgeKind_PURGE_KIND_PREFIX, Host: "www.example.com", PathPrefix: "/static/",
			CreatedAt: timestamppb.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)), Revision: 812},
		Results: []*pb.PurgeResult{
			{NodeId: "node-1", PurgeId: "deploy-1234", ObjectsRemoved: 120, RevisionApplied: 812},
			{NodeId: "node-2", PurgeId: "deploy-1234", ObjectsRemoved: 4096, RevisionApplied: 812, Sweeping: true},
			{NodeId: "node-3", PurgeId: "deploy-1234", RevisionApplied: 790, Error: "disk tier: read-only file system"},
		},
		Pending:      []string{"node-4", "node-5"},
		Unreachable:  []*pb.UnreachableNode{{NodeId: "node-5", Since: timestamppb.New(time.Date(2026, 11, 30, 11, 58, 0, 0, time.UTC))}},
		Acknowledged: 3,
		// Half the nodes acknowledged; 99 in 100 never did.
		AckP50: durationpb.New(41500 * time.Microsecond),
	}
}

func TestPurgeOutput(t *testing.T) {
	goldenFormats(t, "purge", testPurgeStatus(), purgeTable)
}

func TestPurgeKind(t *testing.T) {
	tests := []struct {
		p                *pb.Purge
		kind, wantTarget string
	}{
		{&pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_URL, Url: "https://www.example.com/"}, "url", "https://www.example.com/"},
		{&pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_URL, Key: "httpwww.example.com/"}, "key", "httpwww.example.com/"},
		{&pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_PREFIX, PathPrefix: "/"}, "prefix", "every host /"},
		{&pb.Purge{Kind: pb.PurgeKind_PURGE_KIND_TAG, Tag: "product-42"}, "tag", "product-42"},
	}
	for _, tt := range tests {
		if kind, target := purgeKind(tt.p); kind != tt.kind || target != tt.wantTarget {
			t.Errorf("purgeKind(%v) = %s %s, want %s %s", tt.p, kind, target, tt.kind, tt.wantTarget)
		}
	}
}

// Past the control plane's bound, a status lists some nodes and counts the
// rest: what cachectl prints counts them too.
func TestPurgeStatusPastTheBound(t *testing.T) {
	st := &pb.PurgeStatus{Purge: &pb.Purge{Id: "r-1"}, Acknowledged: 900, ResultsOmitted: 899,
		Results: []*pb.PurgeResult{{NodeId: "node-0001", RevisionApplied: 7}}, Pending: []string{"node-0950"}, PendingOmitted: 99}
	var progress bytes.Buffer
	reportPending(&progress, st)
	if want := "waiting for 100 of 1000 nodes: node-0950, and 99 more\n"; progress.String() != want {
		t.Errorf("progress = %q, want %q", progress.String(), want)
	}
	err := purgeOutcome(st, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "100 of 1000 nodes did not acknowledge") {
		t.Errorf("outcome = %v, want 100 of 1000 nodes pending", err)
	}
	var out bytes.Buffer
	tw := tabwriter.NewWriter(&out, 0, 8, 2, ' ', 0)
	purgeTable(tw, st)
	tw.Flush()
	for _, want := range []string{"(899 more acknowledged)", "(99 more)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}
