package controlplane

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// codeTable gives each of the package's errors its gRPC code, in one place;
// the SDK maps the codes back to its own sentinels.
var codeTable = []struct {
	err  error
	code codes.Code
}{
	{ErrEtcd, codes.Unavailable},
	{ErrEpochNotFound, codes.NotFound},
	{ErrPolicyNotFound, codes.NotFound},
	{ErrNodeNotFound, codes.NotFound},
	{ErrEpochConflict, codes.Aborted},
	{ErrSessionConflict, codes.Aborted},
	{ErrPurgeNotFound, codes.NotFound},
	{ErrPurgeConflict, codes.AlreadyExists},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
	{context.Canceled, codes.Canceled},
	{rpctypes.ErrNoLeader, codes.Unavailable},
	{rpctypes.ErrTimeout, codes.Unavailable},
}

// toStatus turns an error of this package into a gRPC status error.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, e := range codeTable {
		if errors.Is(err, e.err) {
			return status.Error(e.code, err.Error())
		}
	}
	// Anything else comes from etcd being unreachable or failing; the caller
	// can retry against another replica or later.
	return status.Error(codes.Unavailable, err.Error())
}
