package front

import (
	"net/http"
	"time"

	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/metrics"
	"github.com/shardcache/shardcache/dataplane/owner"
)

// serveClient is the client listener's handler: every request starts
// here, is decided once on arrival, becomes one owner.Request, is routed,
// and is recorded from the Outcome it had.
func (f *Front) serveClient(w http.ResponseWriter, r *http.Request) {
	start := arrival(w)
	// Decided once, before anything reads the request (arrive.go): the
	// hop fields mean something only on the peer listener, and a client
	// sending them is ignored, never trusted.
	p, client, id, refused := f.arrive(r)
	rec := reply.NewRecorder(w)
	rec.ID = r.Header["X-Request-Id"] // set by arrive, one value
	if len(rec.ID) != 1 || rec.ID[0] != id {
		rec.ID = []string{id} // a PURGE's id, which is sent on as it came
	}
	req := &owner.Request{HTTP: r, ID: id, Policy: p, Routes: f.cfg.Routes.Load(), Now: start}
	if f.cfg.Logs.FullActive() {
		req.Account = &owner.Account{} // a full stream shows the request's stages and calls
	}
	var out owner.Outcome
	route := metrics.RouteAborted
	// Deferred, so that a response aborted mid-body is counted and logged.
	defer func() { f.record(rec, req, route, out, client) }()
	if r.Body != nil && r.Body != http.NoBody && f.cfg.BodyTimeout > 0 {
		r.Body = &progressBody{ReadCloser: r.Body, rc: http.NewResponseController(w), header: rec.Header(), wait: f.cfg.BodyTimeout}
	}
	switch {
	case refused != nil:
		route = metrics.RouteRejected
		http.Error(rec, refused.msg, refused.status)
	case r.Method == "PURGE":
		route = metrics.RoutePurge
		f.servePurge(rec, r, client)
	default:
		route, out = f.route(rec, req)
	}
}

// arrival is when the request's head was read, as the client port's
// server tells it (the clock reading its answer's Date is from), else now:
// a request's time, age and duration come from one reading.
func arrival(w http.ResponseWriter) time.Time {
	if a, ok := w.(interface{ Arrived() time.Time }); ok {
		return a.Arrived()
	}
	return time.Now()
}
