package controlplane

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

func TestReflectionNeedsTheTokenHealthIsOpen(t *testing.T) {
	s, _, _ := startServer(t, nil)
	conn := dial(t, s)
	st, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
	if err == nil {
		st.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}})
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("reflection without a token: %v", err)
	}
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health: %v", err)
	}
	w, err := pb.NewAdminServiceClient(conn).Warm(context.Background(), &pb.WarmRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Warm stream without a token: %v", err)
	}
}
