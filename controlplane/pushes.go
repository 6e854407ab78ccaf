package controlplane

import (
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// What every session sends alike (an epoch, its change from the one
// before, a purge) is encoded once per replica and shared by every stream:
// an encoded message goes through the server's codec as it is.

// encoded is a SessionResponse already marshalled.
type encoded []byte

// sharedCodec is the proto codec, but sends an encoded message as is.
type sharedCodec struct{ encoding.CodecV2 }

func newSharedCodec() sharedCodec { return sharedCodec{encoding.GetCodecV2("proto")} }

// pooled is a SessionResponse marshalled into a pooled buffer
// (batchBuffers): the buffer goes back to its pool once the stream has
// written it.
type pooled struct{ mem.Buffer }

// Marshal returns an encoded message's bytes, or marshals any other.
func (c sharedCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch e := v.(type) {
	case encoded:
		return mem.BufferSlice{mem.SliceBuffer(e)}, nil
	case pooled:
		return mem.BufferSlice{e.Buffer}, nil
	}
	return c.CodecV2.Marshal(v)
}

// Field numbers of the SessionResponse messages built by hand.
var (
	fieldPurgeBatch = protowire.Number((&pb.SessionResponse{}).ProtoReflect().Descriptor().Fields().ByName("purges").Number())
	fieldBatchItem  = protowire.Number((&pb.PurgeBatch{}).ProtoReflect().Descriptor().Fields().ByName("purges").Number())
)

// batchItem is p encoded as one element of PurgeBatch.purges: a batch is
// its items end to end, so a purge is marshalled once whatever the number
// of sessions and batches it goes out in.
func batchItem(p *pb.Purge) []byte {
	b, _ := proto.Marshal(p) // a purge always marshals
	out := protowire.AppendTag(make([]byte, 0, len(b)+8), fieldBatchItem, protowire.BytesType)
	return protowire.AppendBytes(out, b)
}

// purgeBatchMessage is SessionResponse{purges: PurgeBatch{items}}, in a
// buffer of pool: a push to a session costs no allocation of its size,
// however many purges it carries.
func purgeBatchMessage(items [][]byte, pool mem.BufferPool) pooled {
	n := 0
	for _, it := range items {
		n += len(it)
	}
	buf := pool.Get(protowire.SizeTag(fieldPurgeBatch) + protowire.SizeBytes(n))
	out := protowire.AppendTag((*buf)[:0], fieldPurgeBatch, protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(n))
	for _, it := range items {
		out = append(out, it...)
	}
	*buf = out
	return pooled{mem.NewBuffer(buf, pool)}
}

// snapshotMembersBytes bounds a SnapshotMembers message.
const snapshotMembersBytes = 256 << 10

// sessionWindow is the fixed flow-control window of a stream and of a
// connection (server.go).
const sessionWindow = 1 << 20

// epochMessages are an epoch's pushes, encoded once: the whole epoch, its
// change from the epoch this replica had before it (nil for the first),
// and its members cut into SnapshotMembers messages for joining nodes.
type epochMessages struct {
	epoch   *pb.RingEpoch
	full    encoded
	base    uint64
	change  encoded
	members []encoded
	// bare is the epoch without its members, for the snapshot that
	// follows members.
	bare *pb.RingEpoch
	// baseCreatedAt is when the epoch before (base) was written.
	baseCreatedAt *timestamppb.Timestamp
}

// held is the epoch, without members, that a node's hello says it holds
// (number and created_at), when that is this epoch or the one before it
// (whose change then follows the snapshot); nil when the node must be sent
// the members. The created_at tells an epoch apart from one of the same
// number in another etcd's history.
func (m *epochMessages) held(hello *pb.Hello) *pb.RingEpoch {
	at := hello.GetLastEpochCreatedAt()
	if m == nil || at == nil || hello.GetLastEpoch() == 0 {
		return nil
	}
	switch {
	case hello.GetLastEpoch() == m.epoch.GetEpoch() && proto.Equal(at, m.epoch.GetCreatedAt()):
		return m.bare
	case m.change != nil && hello.GetLastEpoch() == m.base && proto.Equal(at, m.baseCreatedAt):
		return &pb.RingEpoch{Epoch: m.base, CreatedAt: m.baseCreatedAt}
	}
	return nil
}

// epochOrNil is the epoch of m, nil before the first.
func (m *epochMessages) epochOrNil() *pb.RingEpoch {
	if m == nil {
		return nil
	}
	return m.epoch
}

func mustEncode(m *pb.SessionResponse) encoded {
	b, _ := proto.Marshal(m) // session responses always marshal
	return b
}

func newEpochMessages(prev, e *pb.RingEpoch) *epochMessages {
	out := &epochMessages{epoch: e, full: mustEncode(&pb.SessionResponse{Msg: &pb.SessionResponse_Epoch{Epoch: e}}),
		bare: &pb.RingEpoch{Epoch: e.GetEpoch(), CreatedAt: e.GetCreatedAt(), PreviousEpoch: e.GetPreviousEpoch(), Reason: e.GetReason()}}
	if prev != nil {
		c := epochChange(prev, e)
		out.base, out.baseCreatedAt = prev.GetEpoch(), prev.GetCreatedAt()
		out.change = mustEncode(&pb.SessionResponse{Msg: &pb.SessionResponse_EpochChange{EpochChange: c}})
	}
	var chunk []*pb.Member
	size := 0
	flush := func() {
		out.members = append(out.members, mustEncode(&pb.SessionResponse{Msg: &pb.SessionResponse_SnapshotMembers{
			SnapshotMembers: &pb.SnapshotMembers{Members: chunk, Epoch: e.GetEpoch()}}}))
		chunk, size = nil, 0
	}
	for _, m := range e.GetMembers() {
		n := proto.Size(m) + 6
		if size+n > snapshotMembersBytes && len(chunk) > 0 {
			flush()
		}
		chunk = append(chunk, m)
		size += n
	}
	if len(chunk) > 0 {
		flush()
	}
	return out
}

// epochChange is next as its difference from prev.
func epochChange(prev, next *pb.RingEpoch) *pb.RingEpochChange {
	c := &pb.RingEpochChange{Epoch: next.GetEpoch(), BaseEpoch: prev.GetEpoch(), PreviousEpoch: next.GetPreviousEpoch(),
		CreatedAt: next.GetCreatedAt(), Reason: next.GetReason()}
	old := make(map[string]*pb.Member, len(prev.GetMembers()))
	for _, m := range prev.GetMembers() {
		old[m.GetId()] = m
	}
	for _, m := range next.GetMembers() {
		if o, ok := old[m.GetId()]; !ok || !proto.Equal(o, m) {
			c.Upserted = append(c.Upserted, m)
		}
		delete(old, m.GetId())
	}
	for id := range old {
		c.Removed = append(c.Removed, id)
	}
	slices.SortFunc(c.Upserted, func(a, b *pb.Member) int { return strings.Compare(a.GetId(), b.GetId()) })
	slices.Sort(c.Removed)
	return c
}

// pushChanges sends the node what changed since the session's last push:
// policies, the epoch, and purges (paced).
func (r *sessionRun) pushChanges() error {
	if err := r.pushPolicies(); err != nil {
		return err
	}
	if err := r.pushEpoch(); err != nil {
		return err
	}
	return r.pacePurges()
}

func (r *sessionRun) pushPolicies() error {
	ps := r.n.policies.since(r.sentPolicies)
	if ps == nil {
		return nil
	}
	if err := r.stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Policies{Policies: ps}}); err != nil {
		return err
	}
	r.sentPolicies = ps.GetRevision()
	return nil
}

// pushEpoch sends the current epoch if the node lacks it: to a compact
// node that has the one before, as the change from it.
func (r *sessionRun) pushEpoch() error {
	msgs := r.n.hub.messages()
	if msgs == nil || msgs.epoch.GetEpoch() <= r.sentEpoch {
		return nil
	}
	m := msgs.full
	if r.compact && msgs.change != nil && msgs.base == r.sentEpoch {
		m = msgs.change
	}
	if err := r.stream.SendMsg(m); err != nil {
		return err
	}
	r.sentEpoch = msgs.epoch.GetEpoch()
	return nil
}

// purgePushPace is the least time between two purge pushes to a session:
// a purge goes out at once to a session that had none in the last pace,
// and purges that come faster go out together at its end. It bounds the
// messages a session carries to 1/purgePushPace a second, whatever the
// rate of purges: each message costs a write and a read at both ends, and
// at 1,000 sessions on two cores 200 ms carried more sustained purges than
// 100 ms or 50 ms (docs/scale.md); a purge alone still goes out at once.
const purgePushPace = 200 * time.Millisecond

// pacePurges pushes the new purges now, or at the end of the pace.
func (r *sessionRun) pacePurges() error {
	if r.paced != nil {
		return nil // a push is due already
	}
	if r.n.purges.head() <= r.sentPurges {
		return nil // woken by an epoch or a policy: no purge to send, and none to pace the next by
	}
	if wait := purgePushPace - time.Since(r.pushedAt); wait > 0 {
		r.setPaced(time.NewTimer(wait))
		return nil
	}
	return r.pushPurges()
}

// setPaced sets the paced push due (nil: none), and with it whether
// recorded purges wake the session: not while one is due. A push reads the
// hub after the mute is cleared, so none recorded meanwhile is missed.
func (r *sessionRun) setPaced(t *time.Timer) {
	r.paced = t
	r.purgesMuted.Store(t != nil)
}

// pacedC fires when a paced push is due; nil (never) when none is.
func (r *sessionRun) pacedC() <-chan time.Time {
	if r.paced == nil {
		return nil
	}
	return r.paced.C
}

// batchBuffers are the buffers purge batches are encoded in: a pool of
// its own, which neither clears a buffer nor rounds its size up.
var batchBuffers = &bufferPool{}

type bufferPool struct{ p sync.Pool }

// Get returns a buffer of n bytes, not cleared.
func (b *bufferPool) Get(n int) *[]byte {
	if v, ok := b.p.Get().(*[]byte); ok && cap(*v) >= n {
		*v = (*v)[:n]
		return v
	}
	s := make([]byte, n, n+n/4) // room for the next batch to be a little larger
	return &s
}

// Put keeps buf for a later batch, unless it is larger than a batch
// usually is.
func (b *bufferPool) Put(buf *[]byte) {
	if cap(*buf) <= 256<<10 {
		b.p.Put(buf)
	}
}

// itemSlices are the slices pushes gather a batch's items in, shared by
// every session (a session pushes a few times a second at most).
var itemSlices = sync.Pool{New: func() any { return new([][]byte) }}

// pushPurges sends the purges recorded since the last push: to a compact
// node all of them in batches of shared encodings, else one a message.
func (r *sessionRun) pushPurges() error {
	r.pushedAt = time.Now()
	if !r.compact {
		ps, _, err := r.n.purges.since(r.stream.Context(), r.sentPurges)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if err := r.stream.Send(&pb.SessionResponse{Msg: &pb.SessionResponse_Purge{Purge: p}}); err != nil {
				return err
			}
			r.sentPurges = p.GetRevision()
		}
		return nil
	}
	gathered := itemSlices.Get().(*[][]byte)
	defer func() {
		clear(*gathered)
		itemSlices.Put(gathered)
	}()
	for {
		items, last, err := r.n.purges.itemsSince(r.stream.Context(), (*gathered)[:0], r.sentPurges, missedPurgesBytes)
		if err != nil {
			return err
		}
		*gathered = items
		if len(items) == 0 {
			return nil
		}
		if err := r.stream.SendMsg(purgeBatchMessage(items, batchBuffers)); err != nil {
			return err
		}
		r.sentPurges = last
	}
}
