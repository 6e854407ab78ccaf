package ring

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
)

// Member is one ring member. ID is the stable node id (never an IP), because
// placement must survive a node changing address; hashing an address would
// reshuffle its keys on every restart. Weight 0 means 1, so that the zero
// value is a usable default; the type is unsigned, so a negative weight
// cannot be expressed.
type Member struct {
	ID     string
	Weight uint32
}

// ErrNoMembers is returned by New for an empty member list: a ring without
// members cannot place any key, and failing at build time is easier to
// diagnose than a zero Member returned from every lookup.
var ErrNoMembers = errors.New("ring: no members")

// ErrDuplicateID is returned by New when two members share an ID, since the
// ID is what the placement hash is derived from and two equal IDs would
// always tie.
var ErrDuplicateID = errors.New("ring: duplicate member id")

// ErrEmptyID is returned by New for a member without an ID, which is almost
// always a configuration mistake rather than an intended node name.
var ErrEmptyID = errors.New("ring: empty member id")

// Ring is the placement view of one ring epoch. It is immutable once built,
// so one *Ring can be shared by all goroutines without locking and swapped
// atomically when the epoch changes.
//
// The epoch is only a label: it deliberately does not seed the hash, so
// moving from one epoch to the next moves only the keys that the membership
// change forces to move.
type Ring struct {
	epoch   uint64
	members []Member  // sorted by ID, Weight normalised to >= 1
	hashes  []uint64  // per-member hash, parallel to members
	weights []float64 // parallel to members; nil when all weights are equal
}

// memberSeed separates the member hash domain from the key hash domain, so a
// key that happens to equal a member ID does not get a degenerate score.
const memberSeed = 0x9e3779b97f4a7c15

// New builds the ring for one epoch. The member slice is copied and sorted
// by ID, so callers that list members in different orders still agree on
// placement, and later changes to the caller's slice cannot affect the ring.
func New(epoch uint64, members []Member) (*Ring, error) {
	if len(members) == 0 {
		return nil, ErrNoMembers
	}
	for i, m := range members {
		if m.ID == "" {
			// The position in the caller's list is the only way to point at
			// a member that has no name.
			return nil, fmt.Errorf("%w: member %d of %d", ErrEmptyID, i, len(members))
		}
	}
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	r := &Ring{
		epoch:   epoch,
		members: ms,
		hashes:  make([]uint64, len(ms)),
	}
	uniform := true
	for i := range ms {
		m := &ms[i]
		if i > 0 && ms[i-1].ID == m.ID {
			return nil, fmt.Errorf("%w: %q", ErrDuplicateID, m.ID)
		}
		if m.Weight == 0 {
			m.Weight = 1
		}
		if m.Weight != ms[0].Weight {
			uniform = false
		}
		r.hashes[i] = mix64(KeyHash(m.ID) + memberSeed)
	}
	if !uniform {
		r.weights = make([]float64, len(ms))
		for i, m := range ms {
			r.weights[i] = float64(m.Weight)
		}
	}
	return r, nil
}

// Epoch returns the epoch the ring was built for, so callers can tell which
// membership version a placement decision was made against.
func (r *Ring) Epoch() uint64 {
	if r == nil {
		return 0
	}
	return r.epoch
}

// Members returns the members sorted by ID with weights normalised (0 shown
// as 1). It is a copy because the ring must stay immutable.
func (r *Ring) Members() []Member {
	if r == nil {
		return nil
	}
	return slices.Clone(r.members)
}

// Len returns the number of members; it bounds how many distinct owners a key
// can have.
func (r *Ring) Len() int {
	if r == nil {
		return 0
	}
	return len(r.members)
}

// Has reports whether id is a member of this epoch, so a node can check that
// it is still part of the ring before serving as an owner.
func (r *Ring) Has(id string) bool {
	_, ok := r.index(id)
	return ok
}

func (r *Ring) index(id string) (int, bool) {
	if r == nil {
		return 0, false
	}
	return slices.BinarySearchFunc(r.members, id, func(m Member, id string) int {
		return strings.Compare(m.ID, id)
	})
}

// Owner returns the primary owner of key. It returns the zero Member for a
// nil or empty ring instead of panicking, so a process that has not received
// its first epoch yet degrades to "no owner" rather than crashing.
func (r *Ring) Owner(key string) Member {
	if r == nil || len(r.members) == 0 {
		return Member{}
	}
	return r.members[r.owner(KeyHash(key))]
}

func (r *Ring) owner(kh uint64) int {
	best := 0
	if r.weights == nil {
		// Equal weights: w/-ln(u) is monotonic in u, and u is monotonic in
		// the mixed value, so comparing the raw values gives the same order
		// without any floating point.
		top := mix64(kh ^ r.hashes[0])
		for i := 1; i < len(r.hashes); i++ {
			if h := mix64(kh ^ r.hashes[i]); h > top {
				top, best = h, i
			}
		}
		return best
	}
	top := r.weights[0] / negLnUnit(mix64(kh^r.hashes[0]))
	for i := 1; i < len(r.hashes); i++ {
		h, w := mix64(kh^r.hashes[i]), r.weights[i]
		if !mayBeat(h, w, top) {
			continue
		}
		if s := w / negLnUnit(h); s > top {
			top, best = s, i
		}
	}
	return best
}

// Owners returns the ordered distinct owners of key: the primary first, then
// the replicas in the order they take over when the ones before them leave.
// It returns at most min(n, Len()) members and nil when n <= 0.
func (r *Ring) Owners(key string, n int) []Member {
	k := min(n, r.Len())
	if k <= 0 {
		return nil
	}
	return r.AppendOwners(make([]Member, 0, k), key, n)
}

// maxStackOwners bounds the owner count that AppendOwners ranks in a stack
// buffer; replication factors are tiny, so larger n is a slow path that may
// allocate.
const maxStackOwners = 64

// AppendOwners appends what Owners(key, n) returns to dst and returns the
// extended slice. It exists for the request hot path: with enough capacity in
// dst and n <= 64 it does not allocate.
func (r *Ring) AppendOwners(dst []Member, key string, n int) []Member {
	k := min(n, r.Len())
	if k <= 0 {
		return dst
	}
	kh := KeyHash(key)
	switch {
	case k == 1:
		return append(dst, r.members[r.owner(kh)])
	case k == 2 && r.weights == nil:
		i1, i2 := r.top2(kh)
		return append(dst, r.members[i1], r.members[i2])
	case k <= 4:
		var buf [4]entry
		return r.appendTop(dst, r.top(kh, buf[:k]))
	case k <= maxStackOwners:
		return r.appendOwnersStack(dst, kh, k)
	default:
		return r.appendOwnersSorted(dst, kh, k)
	}
}

// IsOwner reports whether id is among the first n owners of key. It counts
// the members that outrank id instead of building the owner list, so it is
// allocation-free for any n.
func (r *Ring) IsOwner(key, id string, n int) bool {
	if n <= 0 {
		return false
	}
	idx, ok := r.index(id)
	if !ok {
		return false
	}
	if n >= len(r.members) {
		return true
	}
	kh := KeyHash(key)
	ahead := 0
	if r.weights == nil {
		own := mix64(kh ^ r.hashes[idx])
		for i, mh := range r.hashes {
			if h := mix64(kh ^ mh); h > own || (h == own && i < idx) {
				if ahead++; ahead >= n {
					return false
				}
			}
		}
		return true
	}
	own := r.weights[idx] / negLnUnit(mix64(kh^r.hashes[idx]))
	for i, mh := range r.hashes {
		h, w := mix64(kh^mh), r.weights[i]
		if i == idx || !mayBeat(h, w, own) {
			continue
		}
		if s := w / negLnUnit(h); s > own || (s == own && i < idx) {
			if ahead++; ahead >= n {
				return false
			}
		}
	}
	return true
}

// KeyHash is the 64-bit FNV-1a hash of key that all placement starts from.
// It is exported so tools and tests in other packages can sample or bucket
// keys exactly the way the ring sees them.
func KeyHash(key string) uint64 {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= prime64
	}
	return h
}

// entry is one ranked candidate. Scores of one ring are all of the same kind
// (raw mixed value, or the bits of a positive float64, which order like the
// floats themselves), so they compare as plain uint64.
type entry struct {
	score uint64
	idx   int
}

// score is the rendezvous score of member i for key hash kh; higher wins,
// equal scores go to the lower index (the smaller ID).
func (r *Ring) score(kh uint64, i int) uint64 {
	h := mix64(kh ^ r.hashes[i])
	if r.weights == nil {
		return h
	}
	// Logarithmic method: w / -ln(u) with u uniform in (0,1) makes the
	// probability of winning proportional to w, and adding or removing a
	// member never changes the others' scores.
	return math.Float64bits(r.weights[i] / negLnUnit(h))
}

// top fills buf (len k >= 1) with the k best members for kh, best first, by
// insertion into a bounded buffer: O(Len*k) but k is the replication factor.
func (r *Ring) top(kh uint64, buf []entry) []entry {
	// The caller guarantees len(buf) <= Len(), so the first k members fill
	// the buffer and every later one only has to beat the current k-th.
	k := len(buf)
	if r.weights == nil {
		for i := range k {
			insert(buf, i, entry{score: mix64(kh ^ r.hashes[i]), idx: i})
		}
		thr := buf[k-1].score
		for i := k; i < len(r.hashes); i++ {
			// Strictly greater: on equal score the member already in the
			// buffer has the smaller ID and keeps its place.
			if h := mix64(kh ^ r.hashes[i]); h > thr {
				insert(buf, k, entry{score: h, idx: i})
				thr = buf[k-1].score
			}
		}
		return buf
	}
	for i := range k {
		s := r.weights[i] / negLnUnit(mix64(kh^r.hashes[i]))
		insert(buf, i, entry{score: math.Float64bits(s), idx: i})
	}
	thr := math.Float64frombits(buf[k-1].score)
	for i := k; i < len(r.hashes); i++ {
		h, w := mix64(kh^r.hashes[i]), r.weights[i]
		if !mayBeat(h, w, thr) {
			continue
		}
		if s := w / negLnUnit(h); s > thr {
			insert(buf, k, entry{score: math.Float64bits(s), idx: i})
			thr = math.Float64frombits(buf[k-1].score)
		}
	}
	return buf
}

// top2 is top for k == 2 with equal weights, the common replication factor.
// Written so the compiler can use conditional moves: which member is in the
// top two changes unpredictably, and the branches of the general insertion
// cost more than the hashing.
func (r *Ring) top2(kh uint64) (int, int) {
	hs := r.hashes
	s1, i1 := mix64(kh^hs[0]), 0
	s2, i2 := mix64(kh^hs[1]), 1
	if s2 > s1 {
		s1, i1, s2, i2 = s2, i2, s1, i1
	}
	for i := 2; i < len(hs); i++ {
		h := mix64(kh ^ hs[i])
		// Strict comparisons: on a tie the member seen first has the
		// smaller ID and ranks ahead.
		c, ci := s2, i2
		if h > s2 {
			c, ci = h, i
		}
		if h > s1 {
			c, ci = s1, i1
			s1, i1 = h, i
		}
		s2, i2 = c, ci
	}
	return i1, i2
}

// insert places e into the descending buf[:filled], dropping the last entry
// when buf is full (the caller has checked that e beats it), and returns the
// new fill. Equal scores stay behind the entries already there, which came
// from smaller IDs.
func insert(buf []entry, filled int, e entry) int {
	if filled < len(buf) {
		filled++
	}
	j := filled - 1
	for j > 0 && e.score > buf[j-1].score {
		buf[j] = buf[j-1]
		j--
	}
	buf[j] = e
	return filled
}

// pruneSlack makes mayBeat conservative: negLnUnit is within 1e-13 relative
// of the true logarithm (TestNegLnUnit) and the bound is evaluated in rounded
// arithmetic, so the bound is inflated far beyond both errors before it is
// trusted to skip a member.
const pruneSlack = 1 + 0x1p-20

// mayBeat reports whether a member with mixed value h and weight w can score
// at least t. Since -ln(u) >= 1-u, its score w/-ln(u) is at most w/(1-u);
// when even that is below t the logarithm is not needed. For most members it
// is not: the best score so far is about w*Len, which only members with u
// close to 1 can reach. Skipping only members that lose for certain keeps
// the result identical to scoring everyone.
func mayBeat(h uint64, w, t float64) bool {
	u := float64((h>>11)|1) * 0x1p-53 // the u of negLnUnit, exact
	return float64(w*pruneSlack) >= float64(t*(1-u))
}

func (r *Ring) appendTop(dst []Member, es []entry) []Member {
	for _, e := range es {
		dst = append(dst, r.members[e.idx])
	}
	return dst
}

// appendOwnersStack is split out so the large buffer only occupies stack in
// the calls that need it.
//
//go:noinline
func (r *Ring) appendOwnersStack(dst []Member, kh uint64, k int) []Member {
	var buf [maxStackOwners]entry
	return r.appendTop(dst, r.top(kh, buf[:k]))
}

// appendOwnersSorted ranks every member; it allocates, which is acceptable
// only because asking for more than maxStackOwners owners is not a hot path.
func (r *Ring) appendOwnersSorted(dst []Member, kh uint64, k int) []Member {
	es := make([]entry, len(r.members))
	for i := range es {
		es[i] = entry{score: r.score(kh, i), idx: i}
	}
	slices.SortFunc(es, func(a, b entry) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return a.idx - b.idx
	})
	return r.appendTop(dst, es[:k])
}

// mix64 is the splitmix64 finaliser. FNV-1a alone avalanches poorly for keys
// that differ only in their last bytes, and rendezvous needs every
// (key, member) pair to look independent.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// negLnUnit returns -ln(u) for u = ((h>>11)|1) / 2^53, which lies strictly
// inside (0,1), so the result is finite and > 0.
//
// math.Log is not used because it is assembly on amd64 and Go code elsewhere,
// and the Go compiler may fuse a*b+c into an FMA on some architectures; either
// could change the last bit between processes and flip a near-tie, giving two
// nodes different owners for the same epoch. This version uses only IEEE
// +,-,*,/ with explicit float64 conversions, which forbid fusion, so it is
// bit-for-bit identical everywhere.
func negLnUnit(h uint64) float64 {
	x := (h >> 11) | 1 // odd, < 2^53: exactly representable
	f := float64(x)
	e := bits.Len64(x) - 1
	// m = x / 2^e in [1,2), by replacing the exponent field (exact).
	m := math.Float64frombits(math.Float64bits(f)&^(0x7ff<<52) | 1023<<52)
	if m > math.Sqrt2 {
		m /= 2 // exact
		e++
	}
	// ln(m) = 2*atanh(s), s = (m-1)/(m+1), |s| <= 0.1716, so nine terms of
	// the odd series leave a truncation error below 1e-15 relative.
	s := (m - 1) / (m + 1)
	z := float64(s * s)
	p := 1.0 / 17
	p = float64(p*z) + 1.0/15
	p = float64(p*z) + 1.0/13
	p = float64(p*z) + 1.0/11
	p = float64(p*z) + 1.0/9
	p = float64(p*z) + 1.0/7
	p = float64(p*z) + 1.0/5
	p = float64(p*z) + 1.0/3
	p = float64(p*z) + 1
	lnm := float64(2 * s * p)
	// ln(u) = (e-53)*ln2 + ln(m), with e-53 <= 0.
	return -(float64(float64(e-53)*math.Ln2) + lnm)
}
