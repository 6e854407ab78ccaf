package metrics

// PeerConn counts a connection the peer hop's client took: reused from
// its pool, or opened.
func (m *Set) PeerConn(reused bool) {
	if reused {
		m.PeerConns.WithLabelValues("reused").Inc()
	} else {
		m.PeerConns.WithLabelValues("opened").Inc()
	}
}
