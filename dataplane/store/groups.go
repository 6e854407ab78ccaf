package store

import (
	"slices"
	"sync"
)

// A group is a set of keys the store keeps together with its index, exact
// through replacement, deletion, eviction and restart: the owner groups a
// URL's Vary variants under the URL's key (Config.Group), to count them and
// to drop them without scanning every key. The index holds no keys, so the
// keys of groups are kept here, by stripe and tag, for the disk's evictions
// to find: a grouped object costs its key's length besides its slot.

// Where a grouped key is held.
const (
	onDisk      = 1
	inProbation = 2
)

type groups struct {
	mu    sync.Mutex
	fn    func(key string) (string, bool)
	held  map[string]map[string]uint8 // group → key → where held
	byTag []map[ident]string          // per stripe: slot ident → grouped key on disk
	// fills are the fills in progress of grouped keys, by group: a delete
	// of the group's key drops them, as one of their own key does.
	fills map[string][]*Writer
}

func (g *groups) init(fn func(string) (string, bool), stripes int) {
	g.fn, g.held = fn, map[string]map[string]uint8{}
	g.byTag = make([]map[ident]string, stripes)
	for i := range g.byTag {
		g.byTag[i] = map[ident]string{}
	}
}

func (g *groups) groupOf(key string) (string, bool) {
	if g.fn == nil {
		return "", false
	}
	return g.fn(key)
}

// join notes key held at where (on disk: in stripe st under id).
func (g *groups) join(key string, where uint8, st int, id ident) {
	grp, ok := g.groupOf(key)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	m := g.held[grp]
	if m == nil {
		m = map[string]uint8{}
		g.held[grp] = m
	}
	m[key] |= where
	if where == onDisk {
		if old, ok := g.byTag[st][id]; ok && old != key {
			g.leaveLocked(old, onDisk) // its slot went to key
		}
		g.byTag[st][id] = key
	}
}

// leave notes key no longer held at where.
func (g *groups) leave(key string, where uint8) {
	if _, ok := g.groupOf(key); !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.leaveLocked(key, where)
}

func (g *groups) leaveLocked(key string, where uint8) {
	grp, _ := g.groupOf(key)
	m := g.held[grp]
	if m == nil {
		return
	}
	if m[key] &^= where; m[key] == 0 {
		delete(m, key)
		if len(m) == 0 {
			delete(g.held, grp)
		}
	}
}

// evicted notes the slots of stripe st with these idents gone from disk.
func (g *groups) evicted(st int, ids []ident) {
	if g.fn == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, id := range ids {
		if k, ok := g.byTag[st][id]; ok {
			delete(g.byTag[st], id)
			g.leaveLocked(k, onDisk)
		}
	}
}

// listFill notes w, a fill of a grouped key, in progress.
func (g *groups) listFill(w *Writer) {
	grp, ok := g.groupOf(w.e.Key)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fills == nil {
		g.fills = map[string][]*Writer{}
	}
	g.fills[grp] = append(g.fills[grp], w)
}

// unlistFill notes the fill w listed by listFill ended.
func (g *groups) unlistFill(w *Writer) {
	grp, ok := g.groupOf(w.e.Key)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if l := slices.DeleteFunc(g.fills[grp], func(o *Writer) bool { return o == w }); len(l) > 0 {
		g.fills[grp] = l
	} else {
		delete(g.fills, grp)
	}
}

// fillsOf returns the fills in progress of group grp's keys.
func (g *groups) fillsOf(grp string) []*Writer {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.fills[grp])
}

// members returns the keys held in group grp.
func (g *groups) members(grp string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := g.held[grp]
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// count returns how many keys group grp holds.
func (g *groups) count(grp string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.held[grp])
}

// onDiskKeys returns the grouped keys on disk, per stripe by slot ident,
// for a checkpoint.
func (g *groups) onDiskKeys() []map[ident]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]map[ident]string, len(g.byTag))
	for i, m := range g.byTag {
		out[i] = make(map[ident]string, len(m))
		for t, k := range m {
			out[i][t] = k
		}
	}
	return out
}

// clearDisk notes every grouped key gone from disk.
func (g *groups) clearDisk() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, m := range g.byTag {
		for _, k := range m {
			g.leaveLocked(k, onDisk)
		}
		g.byTag[i] = map[ident]string{}
	}
}
