package opsclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// member is a node whose ops listener is h, a real HTTP server.
func member(t *testing.T, h http.HandlerFunc) *pb.Member {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &pb.Member{Id: "node-1", OpsUrl: srv.URL}
}

// lines answers a warm with n empty steps, then the summary when summary.
func lines(n int, summary bool) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(strings.Repeat("{}\n", n)))
		if summary {
			fmt.Fprintln(w, `{"summary": {"node": "node-1"}}`)
		}
	}
}

// TestWarmBounds: a node may send MaxWarmSteps lines, its summary last;
// one more, a line over MaxWarmLine, or an answer without a summary
// breaks the warm off, naming the node.
func TestWarmBounds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		h     http.HandlerFunc
		steps int
		err   string // "": the summary
	}{
		{"at the bound", lines(MaxWarmSteps-1, true), MaxWarmSteps - 1, ""},
		{"past the bound", lines(MaxWarmSteps, true), MaxWarmSteps, fmt.Sprintf("node-1 /warm: more than %d progress lines", MaxWarmSteps)},
		{"a line too long", func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "{}\n{\"error\": %q}\n", strings.Repeat("x", MaxWarmLine))
		}, 1, "node-1 /warm: the answer broke off before its summary"},
		{"no summary", lines(2, false), 2, "node-1 /warm: the answer ended without its summary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps := 0
			sum, err := Client{}.Warm(context.Background(), member(t, tc.h), &pb.WarmRequest{Images: []string{"a"}},
				func(*pb.WarmProgress) error { steps++; return nil })
			switch {
			case tc.err == "" && (err != nil || sum.GetNode() != "node-1"):
				t.Fatalf("%v %v, want the summary", sum, err)
			case tc.err != "" && (!errors.Is(err, ErrBroken) || !strings.HasPrefix(err.Error(), tc.err)):
				t.Fatalf("%v, want ErrBroken saying %q", err, tc.err)
			case steps != tc.steps:
				t.Fatalf("%d steps, want %d", steps, tc.steps)
			}
		})
	}
}

// TestDoSaysWhatTheNodeDid: each answer but a 200 is an error of its kind
// that names the node and keeps its reason.
func TestDoSaysWhatTheNodeDid(t *testing.T) {
	status := func(code int) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "the reason", code) }
	}
	gone := httptest.NewServer(status(200))
	gone.Close()
	for _, tc := range []struct {
		m    *pb.Member
		kind error
		msg  string
	}{
		{member(t, status(http.StatusUnauthorized)), ErrRefused, "node-1 refused /stats: the reason"},
		{member(t, status(http.StatusForbidden)), ErrRefused, "node-1 refused /stats: the reason"},
		{member(t, status(http.StatusBadRequest)), ErrInvalid, "node-1 /stats: the reason"},
		{member(t, status(http.StatusInternalServerError)), ErrFailed, "node-1 /stats: 500 the reason"},
		{&pb.Member{Id: "node-1"}, ErrNoOpsURL, "node-1: " + ErrNoOpsURL.Error()},
		{&pb.Member{Id: "node-1", OpsUrl: gone.URL}, ErrUnreachable, "node-1 unreachable at " + gone.URL},
	} {
		_, err := Client{Token: "t"}.Do(context.Background(), tc.m, http.MethodGet, "/stats", nil)
		var oe *Error
		if !errors.Is(err, tc.kind) || !errors.As(err, &oe) || oe.Node != "node-1" || !strings.HasPrefix(err.Error(), tc.msg) {
			t.Errorf("%v, want %v saying %q", err, tc.kind, tc.msg)
		}
	}
}

// TestDoFollowsNoRedirect: a member advertises its own ops URL, so what it
// answers is hostile; a redirect must not take the request, and the grant
// or token it carries, to another listener (the same host's other ports
// included, where Go's client keeps the Authorization header), nor pass
// that listener's answer off as the node's.
func TestDoFollowsNoRedirect(t *testing.T) {
	reached := make(chan string, 1)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached <- r.Header.Get("Authorization")
		w.Write([]byte(`{"node": "node-2"}`))
	}))
	defer other.Close()
	m := member(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/stats", http.StatusFound)
	})
	resp, err := Client{Token: "t"}.Do(context.Background(), m, http.MethodGet, "/stats", nil)
	if err == nil {
		resp.Body.Close()
	}
	select {
	case auth := <-reached:
		t.Fatalf("the redirect was followed to another listener, with Authorization %q", auth)
	default:
	}
	var oe *Error
	if !errors.Is(err, ErrFailed) || !errors.As(err, &oe) || oe.Node != "node-1" || !strings.HasPrefix(err.Error(), "node-1 /stats: 302") {
		t.Fatalf("%v, want ErrFailed naming node-1 and the 302", err)
	}
}

// TestDoEscapesTheNodesReason: the reason a node gives is shown to an
// operator as it is in an error; its controls (an escape sequence, C1
// CSI, a CR that overwrites the line, a bidi override) are escaped.
func TestDoEscapesTheNodesReason(t *testing.T) {
	for _, code := range []int{http.StatusForbidden, http.StatusBadRequest, http.StatusInternalServerError} {
		m := member(t, func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "\x1b]0;owned\x07\x1b[2Jfine\rnode-2 ok \u009b31m\u202egnp.exe", code)
		})
		_, err := Client{Token: "t"}.Do(context.Background(), m, http.MethodGet, "/stats", nil)
		if err == nil {
			t.Fatalf("%d: no error", code)
		}
		msg := err.Error()
		if strings.ContainsAny(msg, "\x1b\x07\r\u009b\u202e") || !strings.Contains(msg, `\u001b[2Jfine\u000dnode-2 ok \u009b31m\u202egnp.exe`) {
			t.Errorf("%d: %q, want the reason's controls escaped", code, msg)
		}
	}
}
