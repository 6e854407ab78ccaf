package store

// A group is a set of keys the store keeps together with its index, exact
// through replacement, deletion, eviction and restart: the owner groups a
// URL's Vary variants under the URL's key (Config.Group), to count them and
// to drop them without scanning every key.

func (d *disk) groupOf(key string) (string, bool) {
	if d.group == nil {
		return "", false
	}
	return d.group(key)
}

// members returns the keys held in group g.
func (d *disk) members(g string) []string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	m := d.groups[g]
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// count returns how many keys group g holds.
func (d *disk) count(g string) int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.groups[g])
}

// joinGroupLocked adds key to its group, if it has one; d.mu is held.
func (d *disk) joinGroupLocked(key string) {
	if g, ok := d.groupOf(key); ok {
		m := d.groups[g]
		if m == nil {
			m = map[string]struct{}{}
			d.groups[g] = m
		}
		m[key] = struct{}{}
	}
}

// leaveGroupLocked removes key from its group; d.mu is held.
func (d *disk) leaveGroupLocked(key string) {
	if g, ok := d.groupOf(key); ok {
		if m := d.groups[g]; m != nil {
			delete(m, key)
			if len(m) == 0 {
				delete(d.groups, g)
			}
		}
	}
}
