package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

func TestErrorsMapCodesAndKeepDetails(t *testing.T) {
	tests := []struct {
		code codes.Code
		want error
	}{
		{codes.NotFound, ErrNotFound},
		{codes.Unauthenticated, ErrUnauthenticated},
		{codes.InvalidArgument, ErrInvalid},
		{codes.Unavailable, ErrUnavailable},
		{codes.Aborted, ErrConflict},
		{codes.AlreadyExists, ErrConflict},
	}
	for _, tt := range tests {
		err := fromStatus(status.Error(tt.code, "boom"))
		if !errors.Is(err, tt.want) || status.Code(err) != tt.code {
			t.Errorf("%s: %v is not %v or lost its code", tt.code, err, tt.want)
		}
	}
	if err := fromStatus(status.Error(codes.Internal, "x")); status.Code(err) != codes.Internal || err.Error() != "shardcache: Internal: x" {
		t.Errorf("unmapped code: %v", err)
	}

	// Unavailable because of a node the control plane had do the work.
	nst, _ := status.New(codes.Unavailable, "node-2 unreachable").WithDetails(&errdetails.ErrorInfo{
		Domain: pb.SessionEndDomain, Reason: pb.NodeUnavailableReason, Metadata: map[string]string{"node": "node-2"}})
	if err := fromStatus(nst.Err()); !errors.Is(err, ErrNodeUnavailable) || errors.Is(err, ErrUnavailable) || status.Code(err) != codes.Unavailable {
		t.Errorf("a node's failure: %v, want ErrNodeUnavailable (not the control plane's)", err)
	}

	st, _ := status.New(codes.InvalidArgument, "policy invalid").WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "name", Description: "empty"}}})
	err := validationError("p", fromStatus(st.Err()))
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != "name" || !errors.Is(err, ErrInvalid) {
		t.Fatalf("validation error %v lost its fields", err)
	}
}

func TestBackoffDoublesWithJitter(t *testing.T) {
	backoff := backoffOf(Config{}.withDefaults())
	for n, ms := range []time.Duration{100, 200, 400, 800, 1600, 2000, 2000} {
		want := ms * time.Millisecond
		for range 100 {
			if d := backoff(context.Background(), uint(n+1)); d < want/2 || d > min(want*3/2, 2*time.Second) {
				t.Fatalf("backoff before retry %d = %s, want %s to %s", n+1, d, want/2, min(want*3/2, 2*time.Second))
			}
		}
	}
}

// A token is never sent in cleartext off loopback unless asked for: the
// refusal comes from New, before anything is dialled.
func TestTheTokenCrossesTheNetworkOnlyOverTLS(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"loopback in plaintext", Config{Address: "127.0.0.1:7070", Token: "t"}, true},
		{"localhost in plaintext", Config{Address: "localhost:7070", Token: "t"}, true},
		{"off loopback in plaintext", Config{Address: "cp.example:7070", Token: "t"}, false},
		{"every interface in plaintext", Config{Address: "0.0.0.0:7070", Token: "t"}, false},
		{"off loopback over TLS", Config{Address: "cp.example:7070", Token: "t", TLS: &tls.Config{}}, true},
		{"off loopback in plaintext on purpose", Config{Address: "cp.example:7070", Token: "t", InsecurePlaintext: true}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.cfg)
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				c.Close()
				return
			}
			if !errors.Is(err, ErrCleartext) || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.cfg.Address) {
				t.Fatalf("New = %v, want ErrInvalid naming %s and the cleartext token", err, tt.cfg.Address)
			}
		})
	}
}
