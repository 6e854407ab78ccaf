package store

import "fmt"

// Stats are the store's sizes and event counts.
type Stats struct {
	MemoryBytes, MemoryObjects int64
	DiskBytes, DiskObjects     int64
	// ProbationObjects are the new objects held in memory until their
	// second use (counted in MemoryObjects too).
	ProbationObjects int64
	// IndexBytes is the memory the disk tier's index takes.
	IndexBytes int64
	// Paused is true while the free-space guard keeps the data file from
	// growing and new objects are refused.
	Paused bool
	// Loading is true until the index is loaded; Loaded counts the
	// records indexed so far.
	Loading bool
	Loaded  int64
	// Stripes is the number of stripes; Stopped lists why each stripe that
	// stopped writing after a disk error did.
	Stripes int
	Stopped []string
	// Discarded counts bad records found, by reason; Errors counts disk
	// errors, by operation.
	Discarded, Errors map[string]uint64
	// Admitted, Evicted and Rejected count objects by tier ("memory",
	// "disk") since start: stored, evicted to make room, refused by the
	// tier's admission. Rewritten counts objects a reclaim rewrote
	// forward.
	Admitted, Evicted, Rejected map[string]uint64
	Rewritten                   uint64
}

// Stats returns the store's current figures.
func (s *Store) Stats() Stats {
	d := s.disk
	st := Stats{Paused: d.guard.paused.Load() && d.growing(), Discarded: map[string]uint64{}, Errors: map[string]uint64{},
		Loading: d.loading.Load(), Loaded: d.loaded.Load(), Stripes: len(d.stripes), Rewritten: d.rescued.Load()}
	ma, me, mr := s.mem.Counts()
	st.Admitted = map[string]uint64{"memory": ma, "disk": d.admitted.Load()}
	st.Evicted = map[string]uint64{"memory": me, "disk": d.evicted.Load()}
	st.Rejected = map[string]uint64{"memory": mr, "disk": d.rejected.Load()}
	st.MemoryBytes, st.MemoryObjects = s.mem.Stats()
	for _, sp := range d.stripes {
		sp.imu.RLock()
		st.DiskBytes += sp.tab.used
		st.DiskObjects += int64(sp.tab.n)
		st.IndexBytes += sp.tab.bytes()
		st.ProbationObjects += int64(len(sp.probation.m))
		st.MemoryBytes += sp.probation.bytes
		sp.imu.RUnlock()
		sp.mu.Lock()
		if sp.failed != nil {
			st.Stopped = append(st.Stopped, fmt.Sprintf("stripe %d: %v", sp.id, sp.failed))
		}
		sp.mu.Unlock()
	}
	st.MemoryObjects += st.ProbationObjects
	for k, v := range d.counts.discarded {
		st.Discarded[k] = v.Load()
	}
	for k, v := range d.counts.errors {
		st.Errors[k] = v.Load()
	}
	return st
}
