package metrics

import (
	"github.com/shardcache/shardcache/dataplane/store"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// LoadReport is what a node's session reports to the control plane: the
// store's sizes st, the totals since the node started, the local-only
// estimate of shadow, and the epoch it serves with.
func (m *Set) LoadReport(st store.Stats, shadow *Shadow, epoch uint64) *pb.LoadReport {
	t := &m.Totals
	estRequests, estHits := shadow.Totals()
	bytes := make(map[string]uint64, len(m.RouteBytes))
	for r, c := range m.RouteBytes {
		bytes[r] = c.Load()
	}
	return &pb.LoadReport{
		Epoch:                 epoch,
		MemoryBytes:           st.MemoryBytes,
		MemoryObjects:         st.MemoryObjects,
		DiskBytes:             st.DiskBytes,
		DiskObjects:           st.DiskObjects,
		RequestsTotal:         t.Requests.Load(),
		HitsTotal:             t.Hits.Load(),
		OriginRequestsTotal:   t.OriginRequests.Load(),
		RelayedTotal:          t.Relayed.Load(),
		PeerBytesTotal:        t.PeerBytes.Load(),
		HandoffAnswersTotal:   t.HandoffAnswers.Load(),
		PeerAnswersTotal:      t.PeerAnswers.Load(),
		LocalEstimateRequests: estRequests,
		LocalEstimateHits:     estHits,
		ResponseBytesByRoute:  bytes,
	}
}
