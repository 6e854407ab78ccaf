package owner

import (
	"cmp"
	"errors"
	"io"
	"net/http"

	"github.com/shardcache/shardcache/dataplane/httpcache"
	"github.com/shardcache/shardcache/dataplane/internal/reply"
	"github.com/shardcache/shardcache/dataplane/registry"
	"github.com/shardcache/shardcache/dataplane/store"
)

// An answer that is not from the store: a failure to get one, and a
// fetched response passed on unstored.

// statusHeaders sets X-Cache, X-Cache-Node and Cache-Status for an answer
// that is not stored: the origin's, with its status, or the node's own
// error (status 0).
func (s *serving) statusHeaders(h http.Header, status string, code int) {
	h["X-Cache"] = statusField(cmp.Or(s.passedStale, status))
	h["X-Cache-Node"] = s.nodeField
	m := httpcache.StatusMember{Node: s.statusName, Cache: status, Status: code, Detail: s.reason}
	addCacheStatus(h, m.String())
	s.out.Member, s.out.Node = m, s.cfg.ID
	s.accountField(h)
}

// originError answers code for a failure to get an answer from the
// origin: Proxy-Status names the error's type (RFC 9209).
func (s *serving) originError(code int, err error, msg string) {
	h := s.w.Header()
	s.reason = httpcache.ReasonOriginError
	if errors.Is(err, httpcache.ErrTransferCoding) {
		s.reason = httpcache.ReasonTransferCoding // it answered, undecodably
	}
	s.statusHeaders(h, httpcache.CacheMiss, 0)
	s.out.Source = ""
	h["Proxy-Status"] = []string{httpcache.ProxyStatus(s.statusName, httpcache.ErrorType(err), httpcache.ErrorDetails(err))}
	if ref := s.req.Registry; ref != nil {
		registry.WriteError(s.w, err, code, "registry "+ref.Registry.Host+": "+msg)
		return
	}
	http.Error(s.w, "shardcache: "+msg, code)
}

// writeResponse streams a fetched response that is not stored; a range of
// a 200 is cut from it as it comes, and the rest is not fetched.
func (s *serving) writeResponse(resp *http.Response, fromOrigin bool, status string) {
	s.out.Source = SourcePeer
	if fromOrigin {
		s.out.Source = SourceOrigin
	}
	if rg, ok := passedRange(s.r, resp); ok {
		e := &store.Entry{Status: resp.StatusCode, Header: resp.Header, Received: s.req.Now}
		rd := io.Reader(resp.Body)
		if fromOrigin {
			rd = &countingReader{r: rd, add: s.cfg.Metrics.OriginBytes.Add}
		}
		s.answerFollowing(e, rd, span{0, resp.ContentLength - 1, resp.ContentLength}, rg, status)
		return
	}
	reply.CopyHeader(s.w.Header(), resp.Header)
	s.statusHeaders(s.w.Header(), status, resp.StatusCode)
	s.w.WriteHeader(resp.StatusCode)
	if s.r.Method != http.MethodHead {
		nb, _ := reply.Pass(s.w, resp.Body)
		if fromOrigin {
			s.cfg.Metrics.OriginBytes.Add(float64(nb))
		}
	}
}

// acceptRangesBytes is Accept-Ranges: bytes, shared as statusFields are.
var acceptRangesBytes = []string{"bytes"}

// statusFields are the X-Cache values as header values, shared by every
// answer: a slice whose length is its capacity is never written through
// (an append copies it).
var statusFields = map[string][]string{}
