package owner

import (
	"fmt"
	"net/http"

	"github.com/shardcache/shardcache/dataplane/registry"
)

// A mirror policy's requests (Request.Registry) take the same stages as
// any other, with the registry's rules where they differ: the fetch goes
// to the request's upstream registry through the Upstream client (which
// answers its token challenges and revalidates a tag by HEAD), every
// answer is checked against its digest before anything of it is stored
// (ingested), content by digest is always fresh (decide.go), a tag lives
// for the policy's tag TTL and is served stale whenever its registry
// fails (fetch.go, admit.go).

// fromRegistry fetches the request from its upstream registry.
func (f *fill) fromRegistry() (*http.Response, error) {
	return f.cfg.Upstream.Fetch(f.ctx, f.req.Registry, f.r, f.registryFields())
}

// registryFields are the revalidation's validators: the stored answer's
// ETag, else its Docker-Content-Digest as one (a registry's ETag is the
// manifest's digest).
func (f *fill) registryFields() http.Header {
	if f.stale == nil {
		return nil
	}
	h := f.originFields()
	if len(h["If-None-Match"]) == 0 {
		if d := f.stale.Header.Get("Docker-Content-Digest"); d != "" {
			h.Set("If-None-Match", `"`+d+`"`)
		}
	}
	return h
}

// ingested checks the fetched answer against its digest (registry.Ingest),
// from the registry or a peer alike, and turns a registry's 5xx into an
// OCI error naming it; false when it was refused and the request answered
// with a 502 that every collapsed request shares.
func (f *fill) ingested() bool {
	var err error
	if f.resp.StatusCode >= 500 {
		// Nothing stored to serve instead (fetch.go serves a stored tag
		// stale): the client is told which registry failed, and how.
		err = &registry.Error{Status: http.StatusBadGateway, Code: registry.CodeUpstream,
			Message: fmt.Sprintf("registry %s answered %d: try again later", f.req.Registry.Registry.Host, f.resp.StatusCode)}
	} else {
		err = registry.Ingest(f.resp, f.req.Registry, f.cfg.Metrics.DigestMismatches.Inc)
	}
	if err == nil {
		return true
	}
	f.cfg.Logger.Warn("registry answer refused; nothing stored", "key", f.keyShown(f.key), "err", errText(err))
	f.settle(&fillShare{err: err, code: http.StatusBadGateway})
	f.then = leadAnswer{kind: answerError, code: http.StatusBadGateway, err: err, msg: "answer refused"}
	return false
}
