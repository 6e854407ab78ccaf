package admin

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/shardcache/shardcache/sdk/logquery"
)

// LogRecord is one client request, as the access log and a node's log
// streams (cachectl log) have it: one JSON object a line.
type LogRecord struct {
	Start        time.Time `json:"start"`
	Client       string    `json:"client"`
	ForwardedFor string    `json:"forwarded_for"`
	Method       string    `json:"method"`
	Host         string    `json:"host"`
	Path         string    `json:"path"`
	Proto        string    `json:"proto"`
	Status       int       `json:"status"`
	Bytes        int64     `json:"bytes"`
	DurationMS   float64   `json:"duration_ms"`
	Cache        string    `json:"cache"`
	Route        string    `json:"route"`
	ServedBy     string    `json:"served_by"`
	Node         string    `json:"node"`
	TraceID      string    `json:"trace_id"`
	Referer      string    `json:"referer"`
	UserAgent    string    `json:"user_agent"`
	// Key is the cache key ("" for a request that bypassed the cache),
	// RequestID the request's X-Request-Id, and Reason the rule that
	// decided an answer that was not a plain hit (Cache-Status detail).
	Key       string `json:"key"`
	RequestID string `json:"request_id"`
	Reason    string `json:"reason"`
	// Full is what a full stream adds (LogFilter.Full); nil otherwise.
	Full *LogDetail `json:"full,omitempty"`
}

// LogDetail is a full record's account of a request, as varnishlog gives
// one: the request's and the answer's header fields, the time of each
// stage, and each request made on its behalf.
type LogDetail struct {
	// Request are the client request's header fields as the node read
	// them (its forwarded chain extended, hop-by-hop fields removed);
	// Response the answer's, as sent. Credentials (Authorization, Cookie,
	// Set-Cookie...) show as REDACTED; at most MaxLogFields fields each,
	// values cut at MaxLogValue bytes.
	Request  map[string][]string `json:"request"`
	Response map[string][]string `json:"response"`
	// Stages are the serving node's: this node's, or for a relayed
	// request its owner's.
	Stages LogStages `json:"stages"`
	// Calls are the requests made for it: to the origin, to peers (with
	// the peer's own stages and calls).
	Calls []LogCall `json:"calls"`
	// DroppedCalls counts calls beyond the bound a record keeps.
	DroppedCalls int `json:"dropped_calls,omitempty"`
}

// Bounds of a full record's header fields.
const (
	MaxLogFields = 32
	MaxLogValue  = 256
)

// LogStages are the times a request spent in each stage, in
// milliseconds; zero for a stage it did not pass through.
type LogStages struct {
	LookupMS          float64 `json:"lookup_ms"`
	CollapseWaitMS    float64 `json:"collapse_wait_ms"`
	OriginFirstByteMS float64 `json:"origin_first_byte_ms"`
	StoreMS           float64 `json:"store_ms"`
}

// LogCall is one request made on a client request's behalf.
type LogCall struct {
	// Kind is origin, peer (the owner relayed to), first-owner (a hot
	// key's, filled from) or handoff (the previous owner).
	Kind   string `json:"kind"`
	Node   string `json:"node,omitempty"`
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
	// FirstByteMS is the wait for its answer's header (or its failure).
	FirstByteMS float64 `json:"first_byte_ms"`
	// Stages and Calls are a peer's own account, when it sent one.
	Stages *LogStages `json:"stages,omitempty"`
	Calls  []LogCall  `json:"calls,omitempty"`
}

// LogFields are the fields a log filter (cachectl log --filter) and an
// output template read, beside req.HEADER and resp.HEADER: those marked
// Full are zero unless the stream is full.
var LogFields = map[string]logquery.Field{
	"status": {Kind: logquery.Number}, "bytes": {Kind: logquery.Number},
	"duration": {Kind: logquery.Duration}, "lookup": {Kind: logquery.Duration, Full: true},
	"collapse_wait": {Kind: logquery.Duration, Full: true}, "origin_first_byte": {Kind: logquery.Duration, Full: true},
	"store":  {Kind: logquery.Duration, Full: true},
	"method": {}, "host": {}, "path": {}, "proto": {}, "cache": {}, "route": {}, "reason": {}, "node": {},
	"served_by": {}, "client": {}, "forwarded_for": {}, "trace_id": {}, "request_id": {}, "key": {}, "referer": {},
	"user_agent": {}, "start": {}, "peers": {Full: true},
}

var _ logquery.Record = (*LogRecord)(nil)

// Text is a text field of r (LogFields).
func (r *LogRecord) Text(field string) string {
	switch field {
	case "method":
		return r.Method
	case "host":
		return r.Host
	case "path":
		return r.Path
	case "proto":
		return r.Proto
	case "cache":
		return r.Cache
	case "route":
		return r.Route
	case "reason":
		return r.Reason
	case "node":
		return r.Node
	case "served_by":
		return r.ServedBy
	case "client":
		return r.Client
	case "forwarded_for":
		return r.ForwardedFor
	case "trace_id":
		return r.TraceID
	case "request_id":
		return r.RequestID
	case "key":
		return r.Key
	case "referer":
		return r.Referer
	case "user_agent":
		return r.UserAgent
	case "start":
		return r.Start.Format(time.RFC3339Nano)
	case "peers":
		if r.Full == nil {
			return ""
		}
		var peers []string
		for _, c := range r.Full.Calls {
			if c.Node != "" {
				peers = append(peers, c.Node)
			}
		}
		return strings.Join(peers, ",")
	}
	return ""
}

// Number is a number field of r; a duration's in milliseconds.
func (r *LogRecord) Number(field string) float64 {
	switch field {
	case "status":
		return float64(r.Status)
	case "bytes":
		return float64(r.Bytes)
	case "duration":
		return r.DurationMS
	}
	if r.Full == nil {
		return 0
	}
	st := r.Full.Stages
	switch field {
	case "lookup":
		return st.LookupMS
	case "collapse_wait":
		return st.CollapseWaitMS
	case "origin_first_byte":
		return st.OriginFirstByteMS
	case "store":
		return st.StoreMS
	}
	return 0
}

// Header is the first value of a full record's request (or answer)
// header field; "" when there is none.
func (r *LogRecord) Header(response bool, name string) string {
	if r.Full == nil {
		return ""
	}
	h := r.Full.Request
	if response {
		h = r.Full.Response
	}
	if v := h[http.CanonicalHeaderKey(name)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// NCSA is r in the NCSA combined log format, varnishncsa's default:
// host - - [time] "request line" status bytes "referer" "user agent".
func (r *LogRecord) NCSA() string {
	bytes := "-"
	if r.Bytes > 0 {
		bytes = strconv.FormatInt(r.Bytes, 10)
	}
	q := func(s string) string {
		if s == "" {
			return "-"
		}
		return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s)
	}
	return r.Client + " - - [" + r.Start.Format("02/Jan/2006:15:04:05 -0700") + `] "` + q(r.Method+" "+r.Path+" "+r.Proto) + `" ` +
		strconv.Itoa(r.Status) + " " + bytes + ` "` + q(r.Referer) + `" "` + q(r.UserAgent) + `"`
}
