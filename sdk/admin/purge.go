package admin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// DefaultPurgeWait is how long the control plane waits for the nodes'
// acknowledgements of a purge when PurgeOptions.Wait is zero; MaxPurgeWait
// is the longest wait it accepts.
const (
	DefaultPurgeWait = 10 * time.Second
	MaxPurgeWait     = 60 * time.Second
)

// PurgeOptions are the optional parts of a purge.
type PurgeOptions struct {
	// RequestID names the purge: the control plane records an id once, so
	// repeating a purge with the same id (after a timeout, say) purges
	// nothing twice and returns the first one's outcome, and GetPurge can
	// follow it later; reusing an id for a different purge fails with
	// ErrConflict. Use 1 to 128 letters, digits, '.', '_', ':' or '-'.
	// Empty: the client generates one with NewRequestID.
	RequestID string
	// Wait is how long the control plane waits for every node to
	// acknowledge before it answers; nodes that have not answered by then
	// are listed as pending and apply the purge when they reconnect. Zero
	// means DefaultPurgeWait; at most MaxPurgeWait.
	Wait time.Duration
	// All confirms a PurgePrefix of "/", which removes everything of the
	// host, or of every host when the host is empty. Other purges ignore it.
	All bool
	// Soft marks what matches stale instead of removing it: it is served
	// within the policy's stale-while-revalidate (or stale-if-error when
	// the origin fails) and revalidated with the origin on its next use.
	Soft bool
	// ExceptionsOnly lists in the status's results only the nodes whose
	// result says more than "applied" (an error, a sweep still running,
	// objects removed); the others are counted in Acknowledged. For
	// callers that purge often: the answer stays small at any cluster size.
	ExceptionsOnly bool
}

// NewRequestID returns a random purge request id: 32 hex digits.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails: see crypto/rand.Read
	return hex.EncodeToString(b[:])
}

// requestID is o's request id, or a new one.
func (o PurgeOptions) requestID() string {
	if o.RequestID != "" {
		return o.RequestID
	}
	return NewRequestID()
}

// wait is the wait to send (nil: the server's default) and how long the
// server may hold the call.
func (o PurgeOptions) wait() (*durationpb.Duration, time.Duration) {
	if o.Wait == 0 {
		return nil, DefaultPurgeWait
	}
	return durationpb.New(o.Wait), max(o.Wait, 0)
}

// PurgeURL removes every object stored for an absolute http or https URL
// (its variants, slices and hot copies included) from every node, whatever
// key template its policy has. The returned status lists each node's result
// and the nodes still pending.
func (c *Client) PurgeURL(ctx context.Context, url string, opts PurgeOptions) (*pb.PurgeStatus, error) {
	wait, held := opts.wait()
	resp, err := invokeHeld(ctx, c, held, c.rpc.Purge, &pb.PurgeRequest{RequestId: opts.requestID(), Url: url, Wait: wait, Soft: opts.Soft, ExceptionsOnly: opts.ExceptionsOnly})
	return resp.GetStatus(), err
}

// PurgeKey removes the objects stored under a cache key, exactly as nodes
// store it, for keys no URL maps to.
func (c *Client) PurgeKey(ctx context.Context, key string, opts PurgeOptions) (*pb.PurgeStatus, error) {
	wait, held := opts.wait()
	resp, err := invokeHeld(ctx, c, held, c.rpc.Purge, &pb.PurgeRequest{RequestId: opts.requestID(), Key: key, Wait: wait, Soft: opts.Soft, ExceptionsOnly: opts.ExceptionsOnly})
	return resp.GetStatus(), err
}

// PurgePrefix removes every object of host (case-insensitive; empty: every
// host) whose path and query start with prefix, which starts with "/".
// Prefix "/" is refused with ErrInvalid unless opts.All is set.
func (c *Client) PurgePrefix(ctx context.Context, host, prefix string, opts PurgeOptions) (*pb.PurgeStatus, error) {
	wait, held := opts.wait()
	resp, err := invokeHeld(ctx, c, held, c.rpc.PurgePrefix, &pb.PurgePrefixRequest{
		RequestId: opts.requestID(), Host: host, PathPrefix: prefix, All: opts.All, Wait: wait, Soft: opts.Soft, ExceptionsOnly: opts.ExceptionsOnly})
	return resp.GetStatus(), err
}

// PurgeTag removes every object whose response carried tag in its
// Surrogate-Key or Cache-Tag header (case-insensitive), one tag at a time.
func (c *Client) PurgeTag(ctx context.Context, tag string, opts PurgeOptions) (*pb.PurgeStatus, error) {
	wait, held := opts.wait()
	resp, err := invokeHeld(ctx, c, held, c.rpc.PurgeTag, &pb.PurgeTagRequest{RequestId: opts.requestID(), Tag: tag, Wait: wait, Soft: opts.Soft, ExceptionsOnly: opts.ExceptionsOnly})
	return resp.GetStatus(), err
}

// GetPurge returns a recorded purge with the acknowledgements received so
// far, after waiting up to wait (at most MaxPurgeWait) for the pending
// nodes; zero answers at once. ErrNotFound when no purge has the id.
func (c *Client) GetPurge(ctx context.Context, requestID string, wait time.Duration) (*pb.PurgeStatus, error) {
	resp, err := invokeHeld(ctx, c, wait, c.rpc.GetPurge, &pb.GetPurgeRequest{RequestId: requestID, Wait: durationpb.New(wait)})
	return resp.GetStatus(), err
}
