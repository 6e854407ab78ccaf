package ring

import (
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// This file compares rendezvous hashing (the package) with the two usual
// alternatives, a ketama ring with virtual nodes and Maglev, on lookup cost,
// balance and movement. The alternatives live only here: they exist to
// justify the choice recorded in doc.go, not to be used.

// placer is the part of a placement algorithm the comparison needs.
type placer interface {
	// owner returns the ID of the first owner of key.
	owner(key string) string
}

// multiPlacer is implemented by algorithms with a natural ordered replica
// list; Maglev has none (its table maps a key to one backend).
type multiPlacer interface {
	placer
	appendOwners(dst []string, key string, n int) []string
}

type algorithm struct {
	name  string
	build func(ms []Member) placer
}

var algorithms = []algorithm{
	{"rendezvous", buildRendezvous},
	{"ketama", buildKetama},
	{"maglev", buildMaglev},
}

// sortedMembers validates and sorts through New so every algorithm sees the
// same normalised member list.
func sortedMembers(ms []Member) []Member {
	r, err := New(0, ms)
	if err != nil {
		panic(err)
	}
	return r.Members()
}

// --- rendezvous (this package) ---

type rendezvous struct {
	r       *Ring
	scratch []Member
}

func buildRendezvous(ms []Member) placer {
	r, err := New(0, ms)
	if err != nil {
		panic(err)
	}
	return &rendezvous{r: r, scratch: make([]Member, 0, r.Len())}
}

func (p *rendezvous) owner(key string) string { return p.r.Owner(key).ID }

func (p *rendezvous) appendOwners(dst []string, key string, n int) []string {
	p.scratch = p.r.AppendOwners(p.scratch[:0], key, n)
	for _, m := range p.scratch {
		dst = append(dst, m.ID)
	}
	return dst
}

// --- ketama: consistent hashing ring with virtual nodes ---

// ketamaPointsPerWeight is the classic libketama figure: 160 points per
// weight unit gives a per-member load spread of roughly 1/sqrt(160) = 8%.
const ketamaPointsPerWeight = 160

type ketama struct {
	points     []uint64 // sorted ring positions
	pointOwner []int32  // member index of each point
	ids        []string
}

func buildKetama(in []Member) placer {
	ms := sortedMembers(in)
	type point struct {
		h uint64
		m int32
	}
	var pts []point
	for i, m := range ms {
		for v := range ketamaPointsPerWeight * int(m.Weight) {
			pts = append(pts, point{mix64(KeyHash(m.ID + "-" + strconv.Itoa(v))), int32(i)})
		}
	}
	slices.SortFunc(pts, func(a, b point) int {
		switch {
		case a.h < b.h:
			return -1
		case a.h > b.h:
			return 1
		}
		return int(a.m - b.m)
	})
	k := &ketama{points: make([]uint64, len(pts)), pointOwner: make([]int32, len(pts))}
	for i, p := range pts {
		k.points[i], k.pointOwner[i] = p.h, p.m
	}
	for _, m := range ms {
		k.ids = append(k.ids, m.ID)
	}
	return k
}

// search returns the first point clockwise from the key's position.
func (k *ketama) search(key string) int {
	h := mix64(KeyHash(key))
	// Branch-free lower bound: a textbook binary search mispredicts about
	// half its branches, which would make ketama look slower than a tuned
	// implementation is. The borrow of p-h is 1 exactly when p < h.
	base, n := 0, len(k.points)
	for n > 1 {
		half := n / 2
		_, lt := bits.Sub64(k.points[base+half-1], h, 0)
		base += half & -int(lt)
		n -= half
	}
	if k.points[base] < h {
		base++
	}
	if base == len(k.points) {
		base = 0
	}
	return base
}

func (k *ketama) owner(key string) string { return k.ids[k.pointOwner[k.search(key)]] }

func (k *ketama) appendOwners(dst []string, key string, n int) []string {
	start := len(dst)
	want := min(n, len(k.ids))
	i := k.search(key)
	for step := 0; step < len(k.points) && len(dst)-start < want; step++ {
		id := k.ids[k.pointOwner[i]]
		if !slices.Contains(dst[start:], id) {
			dst = append(dst, id)
		}
		if i++; i == len(k.points) {
			i = 0
		}
	}
	return dst
}

// --- Maglev: lookup table filled from per-member permutations ---

// maglevM is the table size, a prime (so every skip generates a full
// permutation) well above 100x the largest member count measured.
const maglevM = 65537

type maglev struct {
	table []int32
	ids   []string
}

// buildMaglev follows the population algorithm of the Maglev paper (Eisenbud
// et al., NSDI 2016, section 3.4): members take turns claiming their next
// preferred free slot; a weight-w member takes w turns per round.
func buildMaglev(in []Member) placer {
	ms := sortedMembers(in)
	n := len(ms)
	offset := make([]uint64, n)
	skip := make([]uint64, n)
	pos := make([]uint64, n)
	for i, m := range ms {
		h1 := mix64(KeyHash(m.ID))
		h2 := mix64(h1 ^ 0x5bd1e9955bd1e995)
		offset[i] = h1 % maglevM
		skip[i] = h2%(maglevM-1) + 1
		pos[i] = offset[i]
	}
	table := make([]int32, maglevM)
	for i := range table {
		table[i] = -1
	}
	filled := 0
	for filled < maglevM {
		for i := range n {
			for range ms[i].Weight {
				c := pos[i]
				for table[c] >= 0 {
					c = (c + skip[i]) % maglevM
				}
				table[c] = int32(i)
				pos[i] = (c + skip[i]) % maglevM
				if filled++; filled == maglevM {
					break
				}
			}
			if filled == maglevM {
				break
			}
		}
	}
	mg := &maglev{table: table}
	for _, m := range ms {
		mg.ids = append(mg.ids, m.ID)
	}
	return mg
}

func (m *maglev) owner(key string) string {
	return m.ids[m.table[mix64(KeyHash(key))%maglevM]]
}

// --- measurements ---

type figures struct {
	balance       float64 // max/mean keys per member
	addRatio      float64 // moved fraction on add / ideal 1/(N+1)
	addCollateral float64 // fraction of keys that moved between old members on add
	rmRatio       float64 // moved fraction on remove / ideal 1/N
	rmCollateral  float64 // fraction of keys that moved although their owner stayed
}

func ownersOf(p placer, ks []string) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = p.owner(k)
	}
	return out
}

func measure(a algorithm, n int, ks []string) figures {
	ms := nodes(n)
	before := ownersOf(a.build(ms), ks)
	const newID = "node-new"
	added := ownersOf(a.build(append(slices.Clone(ms), Member{ID: newID})), ks)
	gone := ms[n/2].ID
	removed := ownersOf(a.build(slices.Delete(slices.Clone(ms), n/2, n/2+1)), ks)

	var f figures
	f.balance = maxOverMean(before, n)
	total := float64(len(ks))
	var addMoved, addColl, rmMoved, rmColl int
	for i := range ks {
		if added[i] != before[i] {
			addMoved++
			if added[i] != newID {
				addColl++
			}
		}
		if removed[i] != before[i] {
			rmMoved++
			if before[i] != gone {
				rmColl++
			}
		}
	}
	f.addRatio = float64(addMoved) / total * float64(n+1)
	f.addCollateral = float64(addColl) / total
	f.rmRatio = float64(rmMoved) / total * float64(n)
	f.rmCollateral = float64(rmColl) / total
	return f
}

// TestCompareAlgorithms logs balance and movement of every algorithm and
// asserts only what must hold for rendezvous, the one the package ships.
func TestCompareAlgorithms(t *testing.T) {
	if testing.Short() {
		t.Skip("1.8M lookups per algorithm")
	}
	ks := keys()
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-10s %4s  %8s  %9s %9s  %9s %9s\n",
		"algorithm", "N", "max/mean", "add/ideal", "add-coll", "rm/ideal", "rm-coll")
	for _, n := range []int{3, 10, 100} {
		got := map[string]figures{}
		for _, a := range algorithms {
			f := measure(a, n, ks)
			got[a.name] = f
			fmt.Fprintf(&table, "%-10s %4d  %8.4f  %9.4f %9.4f  %9.4f %9.4f\n",
				a.name, n, f.balance, f.addRatio, f.addCollateral, f.rmRatio, f.rmCollateral)
		}
		rv := got["rendezvous"]
		if rv.addCollateral != 0 || rv.rmCollateral != 0 {
			t.Errorf("N=%d: rendezvous moved keys between surviving members (add %.4f, remove %.4f), want none",
				n, rv.addCollateral, rv.rmCollateral)
		}
		if rv.addRatio > 1.1 || rv.rmRatio > 1.1 {
			t.Errorf("N=%d: rendezvous moved/ideal add %.3f remove %.3f, want <= 1.1", n, rv.addRatio, rv.rmRatio)
		}
		if bound := map[int]float64{3: 1.02, 10: 1.03, 100: 1.10}[n]; rv.balance > bound {
			t.Errorf("N=%d: rendezvous max/mean %.4f, want <= %.2f", n, rv.balance, bound)
		}
		for name, f := range got {
			if rv.addCollateral > f.addCollateral || rv.rmCollateral > f.rmCollateral {
				t.Errorf("N=%d: rendezvous moves more keys needlessly than %s", n, name)
			}
		}
	}
	t.Logf("%d keys; add/ideal and rm/ideal: moved fraction over 1/(N+1) and 1/N;"+
		" *-coll: fraction of all keys moved between members that stayed%s", len(ks), table.String())
}

// TestAlternativesAreSane keeps the comparison honest: a broken ketama or
// Maglev would make rendezvous look better than it is.
func TestAlternativesAreSane(t *testing.T) {
	ks := keys()[:20_000]
	for _, a := range algorithms {
		t.Run(a.name, func(t *testing.T) {
			p := a.build(nodes(10))
			if b := maxOverMean(ownersOf(p, ks), 10); b > 1.3 {
				t.Errorf("max/mean = %.3f over 10 members, implementation looks broken", b)
			}
			w := a.build([]Member{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d", Weight: 2}})
			d := 0
			for _, o := range ownersOf(w, ks) {
				if o == "d" {
					d++
				}
			}
			if share := float64(d) / float64(len(ks)); share < 0.35 || share > 0.45 {
				t.Errorf("weight-2 member of 5 weight units owns %.3f, want about 0.4", share)
			}
			if k, ok := p.(*ketama); ok {
				for _, key := range ks {
					want, _ := slices.BinarySearch(k.points, mix64(KeyHash(key)))
					if want == len(k.points) {
						want = 0
					}
					if got := k.search(key); got != want {
						t.Fatalf("ketama search(%q) = %d, want %d", key, got, want)
					}
				}
			}
			mp, ok := p.(multiPlacer)
			if !ok {
				return
			}
			for _, k := range ks[:1000] {
				got := mp.appendOwners(nil, k, 3)
				if len(got) != 3 || got[0] != p.owner(k) || got[0] == got[1] || got[1] == got[2] || got[0] == got[2] {
					t.Fatalf("owners(%q, 3) = %q, want 3 distinct starting with owner", k, got)
				}
			}
		})
	}
}

var sinkID string

// benchKeys are realistic cache keys; 4096 of them so the working set is
// larger than a handful of cache lines but the loop stays branch-cheap.
var benchKeys = func() []string {
	ks := make([]string, 4096)
	for i := range ks {
		ks[i] = "httpexample.com/obj/" + strconv.Itoa(i)
	}
	return ks
}()

func BenchmarkLookup(b *testing.B) {
	weighted := func(n int) []Member {
		ms := nodes(n)
		ms[0].Weight = 2 // one heavier member forces the logarithmic path
		return ms
	}
	cases := []struct {
		name    string
		build   func([]Member) placer
		members func(int) []Member
		owners  int
	}{
		{"rendezvous", buildRendezvous, nodes, 1},
		{"ketama", buildKetama, nodes, 1},
		{"maglev", buildMaglev, nodes, 1},
		{"rendezvous-2owners", buildRendezvous, nodes, 2},
		{"ketama-2owners", buildKetama, nodes, 2},
		{"rendezvous-weighted", buildRendezvous, weighted, 1},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for _, n := range []int{3, 10, 100} {
				b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
					p := c.build(c.members(n))
					const mask = 4095
					i := 0
					if c.owners == 1 {
						for b.Loop() {
							sinkID = p.owner(benchKeys[i&mask])
							i++
						}
						return
					}
					mp := p.(multiPlacer)
					dst := make([]string, 0, c.owners)
					for b.Loop() {
						dst = mp.appendOwners(dst[:0], benchKeys[i&mask], c.owners)
						i++
					}
					sinkID = dst[0]
				})
			}
		})
	}
}

// BenchmarkBuild measures the per-epoch cost each algorithm pays before it
// can serve a lookup.
func BenchmarkBuild(b *testing.B) {
	for _, a := range algorithms {
		b.Run(a.name, func(b *testing.B) {
			for _, n := range []int{3, 10, 100} {
				b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
					ms := nodes(n)
					for b.Loop() {
						_ = a.build(ms)
					}
				})
			}
		})
	}
}
