// Package ring is the placement function every part of shardcache shares:
// it maps a cache key to the ordered list of distinct members that own it in
// one ring epoch. The data plane uses it to route and replicate, the control
// plane to plan rebalancing, tools to predict where a key lives; they only
// agree if they run exactly the same algorithm, so the algorithm lives here,
// depends on nothing but the standard library and has no random seeds.
//
// # Algorithm
//
// Weighted rendezvous (highest random weight) hashing:
//
//   - key hash kh = FNV-1a 64 of the key ([KeyHash]);
//   - member hash mh = splitmix64(FNV-1a 64 of the member ID + constant),
//     computed once per epoch;
//   - per (key, member) value h = splitmix64(kh XOR mh);
//   - with equal weights the score is h itself; otherwise it is
//     weight / -ln(u) with u = ((h>>11)|1) / 2^53 in (0,1) (the logarithmic
//     method, which makes a member's share proportional to its weight);
//   - owners are the members by descending score, equal scores by ascending
//     ID.
//
// The logarithm is computed by the package with plain IEEE arithmetic, not by
// math.Log, whose result may differ in the last bit between architectures.
// The epoch is a label and is not mixed into the hash, so an epoch change
// moves only the keys the membership change forces to move. Any change to
// these steps changes placement for existing clusters; TestGolden pins them.
//
// # Why rendezvous
//
// Measured against a ketama ring (160 virtual nodes per weight unit, binary
// search) and Maglev (65537-slot table) in compare_test.go, rendezvous was
// chosen because:
//
//   - Movement is exactly minimal: a key moves only to an added member or
//     away from a removed one, never between members that stayed (the
//     "coll" columns below). Maglev moves about 1.5x the ideal at 100
//     members; ketama is minimal too but skews load.
//   - Balance is within sampling noise of Maglev's near-perfect table and
//     much better than ketama's (1.09 to 1.23 max/mean), with no tuning knob
//     such as the virtual-node count.
//   - The ordered owner list is natural: the second owner of a key is the
//     member that becomes its first owner if the first leaves, which is what
//     replication factor 2 needs, and it costs one pass like the first
//     owner. Ketama's clockwise walk has the same property but carries its
//     load skew into the replicas; Maglev has no ordered list at all.
//   - Weights are exact (a weight-2 member gets 2/5 next to three weight-1
//     members, within 0.2 points on the test keys) instead of being quantised
//     into virtual nodes or table turns.
//   - An epoch costs microseconds to build (sorting and hashing the IDs)
//     instead of milliseconds for a ketama ring or Maglev table, and the ring
//     holds no per-epoch table.
//
// The price is lookup cost: rendezvous is O(members) per key, so at 100
// members it is 2.3x slower than ketama and 6x slower than Maglev, and with
// unequal weights it is slower again because of the logarithm (most members
// are ruled out by a cheap bound first). At shardcache's cluster sizes this is
// well under a microsecond, small next to serving an HTTP request, and the
// movement and ordering properties matter more than the nanoseconds.
//
// # Figures
//
// Lookup, ns per key (first owner unless noted; keys like
// "httpexample.com/obj/123", FNV-1a included; through a small interface in
// the benchmark, so every algorithm pays one indirect call):
//
//	                           members=3  members=10  members=100
//	rendezvous                      25.3        45.9        148.3
//	rendezvous, 2 owners            32.5        56.8        231.8
//	rendezvous, one weight 2        95.8       160.0        477.5
//	ketama                          45.5        50.8         65.3
//	ketama, 2 owners                75.9        78.0         85.2
//	maglev                          23.3        24.0         23.4
//
// Build per epoch, µs: rendezvous 0.25 / 0.52 / 8.5, ketama 41 / 199 / 2582,
// maglev 977 / 2046 / 3029 (members 3 / 10 / 100).
//
// Balance and movement over the 200,000 keys "k0".."k199999" (exact for this
// key set, the hash being deterministic). max/mean is the busiest member's
// load over a perfect split; add/ideal and rm/ideal are the fraction of keys
// whose first owner changes when a member is added or removed, over 1/(N+1)
// and 1/N; add-coll and rm-coll are the fraction of all keys that moved
// between members that stayed. At 100 members each member expects only 2,000
// keys, so about 1.05 of max/mean is sampling noise for any algorithm.
//
//	algorithm     N  max/mean  add/ideal  add-coll   rm/ideal   rm-coll
//	rendezvous    3    1.0024     1.0074    0.0000     1.0006    0.0000
//	ketama        3    1.0825     1.0797    0.0000     1.0825    0.0000
//	maglev        3    1.0031     0.9978    0.0009     0.9998    0.0003
//	rendezvous   10    1.0056     1.0122    0.0000     1.0034    0.0000
//	ketama       10    1.0871     1.0433    0.0000     0.9948    0.0000
//	maglev       10    1.0158     1.0121    0.0020     1.0125    0.0019
//	rendezvous  100    1.0715     1.0151    0.0000     0.9925    0.0000
//	ketama      100    1.2255     0.9469    0.0000     1.0540    0.0000
//	maglev      100    1.0585     1.5736    0.0058     1.5635    0.0056
//
// Lookup and build times are medians of -count=5 on a shared 2-core
// Intel Xeon VM (linux/amd64, Go 1.26) while other builds were running, so
// read them as ratios rather than absolute numbers. Reproduce from the sdk
// module directory with:
//
//	GOWORK=off go test ./ring/ -run XXX -bench . -benchtime=200ms -count=5
//	GOWORK=off go test ./ring/ -run TestCompareAlgorithms -v
package ring
