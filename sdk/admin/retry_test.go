package admin_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/admin"
)

// flakyAdmin is an AdminService whose Purge fails its first calls with a
// code, or holds them until the caller gives up, and records the request
// id of every call.
type flakyAdmin struct {
	pb.UnimplementedAdminServiceServer
	failures int        // calls that fail before one succeeds; -1: all
	code     codes.Code // their code; OK: held until the caller gives up
	// holdAfter holds every call after the failures until the caller gives up.
	holdAfter bool

	mu  sync.Mutex
	ids []string
}

func (s *flakyAdmin) Purge(ctx context.Context, req *pb.PurgeRequest) (*pb.PurgeResponse, error) {
	s.mu.Lock()
	s.ids = append(s.ids, req.GetRequestId())
	n := len(s.ids)
	s.mu.Unlock()
	if s.failures < 0 || n <= s.failures {
		if s.code == codes.OK {
			<-ctx.Done()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Error(s.code, "replica not ready")
	}
	if s.holdAfter {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &pb.PurgeResponse{Status: &pb.PurgeStatus{Purge: &pb.Purge{Id: req.GetRequestId()}, Complete: true}}, nil
}

func (s *flakyAdmin) calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ids...)
}

// serve starts a gRPC server for srv on a loopback port and returns its
// address.
func serve(t *testing.T, srv pb.AdminServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterAdminServiceServer(gs, srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return lis.Addr().String()
}

func TestRetries(t *testing.T) {
	tests := []struct {
		name      string
		srv       *flakyAdmin
		retries   int
		backoff   time.Duration
		timeout   time.Duration
		requestID string
		wantCalls int
		wantErr   error
	}{
		{name: "unavailable then served", srv: &flakyAdmin{failures: 3, code: codes.Unavailable}, wantCalls: 4},
		{name: "caller's request id kept", srv: &flakyAdmin{failures: 1, code: codes.Unavailable}, requestID: "deploy-42", wantCalls: 2},
		{name: "retries run out", srv: &flakyAdmin{failures: -1, code: codes.Unavailable}, retries: 2, wantCalls: 3, wantErr: admin.ErrUnavailable},
		{name: "retries disabled", srv: &flakyAdmin{failures: -1, code: codes.Unavailable}, retries: -1, wantCalls: 1, wantErr: admin.ErrUnavailable},
		{name: "invalid not retried", srv: &flakyAdmin{failures: 1, code: codes.InvalidArgument}, wantCalls: 1, wantErr: admin.ErrInvalid},
		{name: "no retry past the deadline", srv: &flakyAdmin{failures: -1, code: codes.Unavailable}, backoff: time.Minute, timeout: time.Second, wantCalls: 1, wantErr: admin.ErrUnavailable},
		{name: "caller's deadline not retried", srv: &flakyAdmin{failures: 1}, timeout: 100 * time.Millisecond, wantCalls: 1, wantErr: context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			backoff := tt.backoff
			if backoff == 0 {
				backoff = time.Millisecond
			}
			c, err := admin.New(admin.Config{Address: serve(t, tt.srv), Token: "t", MaxRetries: tt.retries,
				RetryBackoff: backoff, MaxRetryBackoff: backoff})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			st, err := c.PurgeURL(ctx, "https://www.example.com/", admin.PurgeOptions{RequestID: tt.requestID})
			switch {
			case tt.wantErr == context.DeadlineExceeded:
				if status.Code(err) != codes.DeadlineExceeded {
					t.Fatalf("err = %v, want DeadlineExceeded", err)
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			}
			ids := tt.srv.calls()
			if len(ids) != tt.wantCalls {
				t.Fatalf("%d calls, want %d", len(ids), tt.wantCalls)
			}
			// The client says how often it tried, which also shows that a
			// call ended by the caller's deadline was not tried again.
			if tt.wantErr != nil && strings.Contains(err.Error(), "tried") != (tt.wantCalls > 1) {
				t.Errorf("error %q after %d calls", err, tt.wantCalls)
			}
			for _, id := range ids {
				if id != ids[0] {
					t.Fatalf("request ids changed across retries: %q", ids)
				}
			}
			if tt.requestID != "" && ids[0] != tt.requestID {
				t.Errorf("request id %q, want the caller's %q", ids[0], tt.requestID)
			} else if tt.requestID == "" && len(ids[0]) != 32 {
				t.Errorf("generated request id %q is not 32 hex digits", ids[0])
			}
			if tt.wantErr == nil && st.GetPurge().GetId() != ids[0] {
				t.Errorf("status is of purge %q, want %q", st.GetPurge().GetId(), ids[0])
			}
		})
	}
}

func TestRequestIDsDiffer(t *testing.T) {
	if a, b := admin.NewRequestID(), admin.NewRequestID(); a == b {
		t.Fatalf("two request ids are both %q", a)
	}
}

// A retry cut off by the caller's deadline must not hide the failure that
// caused it.
func TestRetryCutByTheDeadlineKeepsTheCause(t *testing.T) {
	srv := &flakyAdmin{failures: 1, code: codes.Unavailable, holdAfter: true}
	c, err := admin.New(admin.Config{Address: serve(t, srv), Token: "t", RetryBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = c.PurgeURL(ctx, "http://h/a", admin.PurgeOptions{})
	if !errors.Is(err, admin.ErrUnavailable) || !strings.Contains(err.Error(), "replica not ready") || len(srv.calls()) != 2 {
		t.Fatalf("after %d calls: %v; want the first failure's message", len(srv.calls()), err)
	}
}
