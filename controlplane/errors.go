package controlplane

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardcache/shardcache/sdk/opsclient"
)

// The package's errors, each with its gRPC code in codeTable below.
var (
	// ErrEtcd marks a failure of etcd itself (unreachable, no leader, timed
	// out): the state is unchanged and the call may be retried.
	ErrEtcd = errors.New("controlplane: etcd unavailable")
	// ErrEpochNotFound is returned for an epoch that is not kept.
	ErrEpochNotFound = errors.New("controlplane: epoch not found")
	// ErrEpochConflict: the current epoch changed under a write.
	ErrEpochConflict = errors.New("controlplane: epoch changed concurrently")
	// ErrSessionConflict: registrations of one id kept racing each other.
	ErrSessionConflict = errors.New("controlplane: the node's session changed concurrently; retry")
	// ErrPolicyNotFound is returned for a policy name that does not exist.
	ErrPolicyNotFound = errors.New("controlplane: policy not found")
	// ErrNodeNotFound is returned for a node id that is not registered.
	ErrNodeNotFound = errors.New("controlplane: node not found")
	// ErrPurgeNotFound is returned for a request id with no recorded purge.
	ErrPurgeNotFound = errors.New("controlplane: purge not found")
	// ErrPurgeConflict is returned when a request id is reused for a
	// different purge.
	ErrPurgeConflict = errors.New("controlplane: request id already used by a different purge")
	// ErrRevisionNotKept is returned for a rollback to a revision older
	// than the policy history holds, or newer than the current one.
	ErrRevisionNotKept = errors.New("controlplane: policy revision not in the history")
	// ErrPolicyConflict: the policy set kept changing under a write.
	ErrPolicyConflict = errors.New("controlplane: the policy set changed concurrently; retry")
)

// Errors that never leave the package.
var (
	// errLostLeadership ends a term; the replica campaigns again.
	errLostLeadership = errors.New("controlplane: leadership lost")
	// errSessionHeld is register's refusal: another process's session for
	// the id is open (sent as ALREADY_EXISTS with SessionEnd DUPLICATE_ID).
	errSessionHeld = errors.New("controlplane: the node id has an open session")
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
	{ErrRevisionNotKept, codes.NotFound},
	{ErrPolicyConflict, codes.Aborted},
	// A node's ops listener, asked for a warm.
	{opsclient.ErrNoOpsURL, codes.InvalidArgument},
	{opsclient.ErrRefused, codes.PermissionDenied},
	{opsclient.ErrInvalid, codes.InvalidArgument},
	{opsclient.ErrUnreachable, codes.Unavailable},
	{opsclient.ErrBroken, codes.Unavailable},
	{opsclient.ErrFailed, codes.Internal},
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

// quoteCut is a caller's value quoted for an error message, cut at 128
// bytes: a message never echoes a megabyte a caller sent (nor does the
// log line that records the failed call).
func quoteCut(s string) string {
	if len(s) > 128 {
		return strconv.Quote(s[:128]) + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return strconv.Quote(s)
}
