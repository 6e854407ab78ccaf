package relay

import (
	"context"
	"time"
)

// Renew asks (by calling ask) for a new certificate when the current one is
// two thirds through its life, again every so often until one comes, and
// every 3 seconds while there is none at all (the first one comes with the
// session's snapshot). It returns when ctx ends.
func (p *Certs) Renew(ctx context.Context, ask func()) {
	lastAsk := time.Now()
	for {
		renewAt, notAfter := p.Due()
		var wait time.Duration
		switch {
		case renewAt.IsZero():
			if time.Since(lastAsk) >= 3*time.Second {
				ask()
				lastAsk = time.Now()
			}
			wait = 200 * time.Millisecond
		case time.Now().Before(renewAt):
			wait = time.Until(renewAt)
		default:
			ask()
			// Room for the answer before asking again.
			wait = max(min(time.Until(notAfter)/4, 2*time.Second), 100*time.Millisecond)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
